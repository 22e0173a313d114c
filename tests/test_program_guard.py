"""benchmarks/program_guard.py: a run's refused feature programs asked again with and without
the decoding guards, each reply read by today's checks; a fake model (the embedded model and
its guards: tests/test_llama_slow.py, tests/test_name_guard.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

import benchmarks.program_guard as guard
import benchmarks.program_speed as speed
from common.chat import ChatPrompt, Reply
from operators.context import TaskContext
from search.journal import Journal
from search.node import Operator, Status
from search.programs import REJECTED, Gate
from tests.helpers import make_node

RATIO = 'df["area"] / df["rooms"]'
PROGRAM = f'def add_features(df):\n    df["r"] = {RATIO}\n    return df\n'


def _run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored run: a ratio scored and not kept on the columns as they are, then a program
    refused for computing it again, one that ran, and one refused for arithmetic on text."""
    scored = dataclasses.replace(
        make_node("f2", None, operator=Operator.FEATURES, step=2),
        code=f"FEATURE_PROGRAMS = [{PROGRAM!r}]\n",
        gate=Gate("b", (-0.1,) * 5, False, "not kept", ("r",)).to_json())
    refused = dataclasses.replace(
        make_node("f3", None, operator=Operator.FEATURES, step=3, status=Status.BUGGY),
        error=f"{REJECTED} it computes what was already scored on this feature set (area / "
              "rooms): compute something new")
    ran = make_node("f4", None, operator=Operator.FEATURES, step=4)
    on_text = dataclasses.replace(
        make_node("f5", None, operator=Operator.FEATURES, step=5, status=Status.BUGGY),
        error=f"{REJECTED} it does arithmetic on text (built), which fails on the rows")
    journal = Journal([make_node("b", operator=Operator.BASELINE, step=1), scored, refused, ran,
                       on_text])
    monkeypatch.setattr(speed, "open_run", lambda run: SimpleNamespace(
        journal=journal, task=lambda: SimpleNamespace()))
    monkeypatch.setattr(speed, "task_context", lambda task, seed: TaskContext(
        preview="flats", target="price", task_type="regression", metric="rmse",
        maximize=False, columns=("rooms", "area", "built")))


def test_refused_programs_are_asked_again_with_and_without_the_guards(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _run(monkeypatch)
    steps = guard.chosen(Path("run"), "repeats")
    assert [s.node.node_id for s in steps] == ["f3"]
    assert [s.node.node_id for s in guard.chosen(Path("run"), "refused")] == ["f3", "f5"]
    assert len(guard.chosen(Path("run"), "all")) == 4
    asked: list[ChatPrompt] = []

    def generate(prompt: ChatPrompt) -> Reply:
        """Guarded, the model writes another column; unguarded, the ratio again."""
        asked.append(prompt)
        value = 'df["area"] / df["built"]' if prompt.never_computations else RATIO
        return Reply(text=f"{prompt.reply_start}[\"x\"] = {value}", prompt_tokens=100,
                     completion_tokens=10, seconds=3.0 if prompt.column_names else 5.0,
                     model="fake")

    records = guard.replayed(steps, generate)
    # the prompt as today's engine writes it, seeded by the program's step
    assert asked[0].never_computations == ("df['area'] / df['rooms']",)
    assert asked[0].never_names == ("price",) and "area" in asked[0].column_names
    assert asked[0].seed == 3 and asked[1] == guard.unguarded(asked[0])
    assert not (asked[1].never_names or asked[1].column_names or asked[1].never_computations)
    assert [(r["arm"], r["outcome"]) for r in records] == [("guarded", "runs"),
                                                          ("unguarded", "repeat")]
    assert records[1]["problem"].startswith(f"{REJECTED} it computes what was already scored")
    text = guard.table(records)
    assert "| guarded | 1 | 1 | 0 | 0 | 0 | 3.0 |" in text
    assert "| unguarded | 1 | 0 | 1 | 0 | 0 | 5.0 |" in text


def test_outcomes_read_from_the_steps_refusals() -> None:
    assert guard.outcome("") == "runs"
    assert guard.outcome(f"{REJECTED} it names a column 'x' that the rows do not have") \
        == "unknown column"
    assert guard.outcome(f"{REJECTED} it computes what is being scored there (a): "
                         "compute something new") == "repeat"
    assert guard.outcome(f"{REJECTED} it reads the target column 'price'") == "other refusal"


def test_runs_without_a_refused_repeat_are_one_line_and_exit_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    _run(monkeypatch)
    monkeypatch.setattr(speed, "open_run", lambda run: SimpleNamespace(journal=Journal([
        make_node("f1", None, operator=Operator.FEATURES, step=1)]), task=lambda: None))
    assert guard.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "none of the runs has a program to replay (repeats)" in err and "\n" not in err
    assert not (tmp_path / "out").exists()
    # a run with no program at all says so
    monkeypatch.setattr(speed, "open_run", lambda run: SimpleNamespace(journal=Journal([])))
    assert guard.main([str(tmp_path)]) == 2
    assert "has no feature program" in capsys.readouterr().err
