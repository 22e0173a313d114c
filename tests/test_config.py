"""Config: budgets, task files, validation with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import RunConfig, load_task_yaml, parse_budget
from search.errors import UserError


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
