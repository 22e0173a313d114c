"""Config: budgets, task files, validation with one-line errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from common.errors import UserError
from engine.config import RunConfig, load_task_yaml, parse_budget


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("10m", 600), ("2h", 7200),
                                          ("45", 45), ("1.5h", 5400), (30, 30)])
def test_parse_budget(text: str, seconds: float) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "10x", "-5m", "0s", "m"])
def test_bad_budget(text: str) -> None:
    with pytest.raises(UserError, match="budget"):
        parse_budget(text)


def test_task_yaml_relative_paths_and_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text("data: d.csv\ntarget: y\nbudget: 2m\nseed: 3\n")
    cfg = load_task_yaml(tmp_path / "task.yaml")
    assert cfg.data == tmp_path / "d.csv" and cfg.budget == 120 and cfg.seed == 3
    (tmp_path / "bad.yaml").write_text("data: d.csv\ntargett: y\n")
    with pytest.raises(UserError, match="unknown key"):
        load_task_yaml(tmp_path / "bad.yaml")
    (tmp_path / "broken.yaml").write_text("data: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_task_yaml(tmp_path / "broken.yaml")


@pytest.mark.parametrize("kwargs,match", [
    ({"target": "y"}, "no data"),
    ({"data": Path("d.csv")}, "no target"),
    ({"data": Path("d.csv"), "target": "y", "metric": "auc2"}, "unknown metric"),
    ({"data": Path("d.csv"), "target": "y", "policy": "nope"}, "unknown policy"),
    ({"data": Path("d.csv"), "target": "y", "llm": "gpt9"}, "unknown LLM"),
    ({"data": Path("d.csv"), "target": "y", "executors": 0}, "executors"),
    ({"data": Path("d.csv"), "target": "y", "max_nodes": 0}, "max-nodes"),
])
def test_validate(kwargs: dict, match: str) -> None:
    with pytest.raises(UserError, match=match):
        RunConfig(**kwargs).validate()


def test_llm_none_with_no_floor_and_no_baseline_has_nothing_to_run() -> None:
    none = RunConfig(data=Path("d.csv"), target="y", llm="none")
    assert none.validate().routes.none
    assert replace(none, floor=False).validate()  # the baseline root alone
    with pytest.raises(UserError, match="leaves nothing to run") as caught:
        replace(none, floor=False, baseline=False).validate()
    assert len(str(caught.value).splitlines()) == 1


def test_without_an_llm_the_executors_take_its_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("engine.config.os.cpu_count", lambda: 4)
    assert RunConfig(llm="llama").executor_count == 3  # one core for the LLM and the driver
    assert RunConfig(llm="none").executor_count == 4
    assert RunConfig(llm="none", executors=2).executor_count == 2  # as given
    monkeypatch.setattr("engine.config.os.cpu_count", lambda: 1)
    assert RunConfig(llm="llama").executor_count == 1


def test_llm_none_starts_no_llm_pool() -> None:
    from engine.placement import llm_options

    config = RunConfig(data=Path("d.csv"), target="y", llm="none").validate()
    assert llm_options(config) == {} and config.routes.specs == []
