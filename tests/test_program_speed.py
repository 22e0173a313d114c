"""benchmarks/program_speed.py: a run's feature-program prompts replayed per setting, with a
fake model (the embedded model itself is tested in tests/test_llama_slow.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import benchmarks.program_speed as speed
from common.chat import ChatPrompt, Reply
from operators.context import TaskContext
from search.journal import Journal
from search.node import Node, Operator, Status
from search.programs import Gate
from tests.helpers import make_node


def _program(step: int, prompt: str) -> Node:
    messages = [{"role": "user", "content": prompt}] if prompt else []
    return Node(node_id=f"f{step}", parent_id=None, operator=Operator.FEATURES,
                status=Status.OK, step=step, temperature=0.5,
                prompt=json.dumps(messages) if messages else "")


def _stored(monkeypatch: pytest.MonkeyPatch, nodes: list[Node]) -> None:
    monkeypatch.setattr(speed, "open_run", lambda run: SimpleNamespace(journal=Journal(nodes)))


def test_the_runs_prompts_in_step_order_with_their_temperature_and_step_seed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    draft = Node(node_id="d", parent_id=None, operator=Operator.DRAFT, status=Status.OK, step=1,
                 prompt=json.dumps([{"role": "user", "content": "a script"}]))
    _stored(monkeypatch, [_program(9, "third"), draft, _program(3, "first"), _program(5, ""),
                          _program(7, "second")])
    prompts = speed.stored_prompts(Path("run"), limit=2)
    assert [p.messages[0]["content"] for p in prompts] == ["first", "second"]
    assert [p.seed for p in prompts] == [3, 7] and {p.temperature for p in prompts} == {0.5}
    assert prompts[0].max_tokens == speed.MAX_TOKENS and prompts[0].stop == speed.STOP
    assert {p.max_tokens for p in speed.stored_prompts(Path("run"), 2, max_tokens=64)} == {64}


def test_a_stored_prompt_on_a_kept_program_begins_its_reply_with_that_programs_statements(
        monkeypatch: pytest.MonkeyPatch) -> None:
    program = ('def add_features(df):\n    df["per_room"] = df["area"] / df["rooms"]\n'
               '    return df\n')
    kept = dataclasses.replace(_program(2, ""), code=model_code_with(program))
    on_it = dataclasses.replace(_program(3, "next"), parent_id=kept.node_id)
    _stored(monkeypatch, [kept, on_it, _program(4, "root")])
    first, second = speed.stored_prompts(Path("run"), limit=2)
    assert first.reply_start.endswith(
        "def add_features(df):\n    df['per_room'] = df['area'] / df['rooms']\n    df")
    assert second.reply_start.endswith("def add_features(df):\n    df")


def model_code_with(program: str) -> str:
    """A kept node's code as far as the reply start reads it: its chain of programs."""
    return f"FEATURE_PROGRAMS = [{program!r}]\n"


def test_rebuilt_prompts_see_the_journal_as_it_stood_before_each_program(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate("b", (-0.1,) * 4, False, "not kept", ("rooms_x_area",)).to_json()
    nodes = [make_node("b", operator=Operator.BASELINE, step=1),
             dataclasses.replace(_program(2, "old"), gate=gate),
             dataclasses.replace(_program(3, "old"), gate=gate)]
    task = SimpleNamespace()
    monkeypatch.setattr(speed, "open_run", lambda run: SimpleNamespace(
        journal=Journal(nodes), task=lambda: task))
    monkeypatch.setattr(speed, "task_context", lambda t, seed: TaskContext(
        preview="flats", target="price", task_type="regression", metric="rmse",
        maximize=False, columns=("rooms", "area")))
    first, second = speed.rebuilt_prompts(Path("run"), limit=5)
    assert "rooms_x_area" not in first.messages[-1]["content"]  # nothing tried before it
    assert "- not kept: added rooms_x_area (gain -0.1)" in second.messages[-1]["content"]
    assert (first.seed, second.seed) == (2, 3)
    assert first.reply_start == "```python\ndef add_features(df):\n    df"  # on the reference
    assert first.max_tokens == speed.MAX_TOKENS
    assert speed.rebuilt_prompts(Path("run"), limit=1, max_tokens=64)[0].max_tokens == 64


def test_a_run_without_programs_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    _stored(monkeypatch, [])
    assert speed.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "stored no feature-program prompt" in err and "\n" not in err
    assert not (tmp_path / "out").exists()
    assert speed.main([str(tmp_path), "--threads", "0"]) == 2
    assert speed.main([str(tmp_path), "--busy", "one"]) == 2
    assert speed.main([str(tmp_path), "--max-tokens", "0"]) == 2
    assert "--max-tokens must be at least 1" in capsys.readouterr().err


class FakeLLM:
    """Seconds grow with the threads' count so that the settings differ; records the busy
    spinners alive while it answers."""

    def __init__(self, threads: int) -> None:
        self.threads, self.closed, self.spinners = threads, False, 0

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        self.spinners = _spinners()
        return [Reply("```python\n```", 100, 10 * (p.seed or 1), float(self.threads * p.seed),
                      "fake") for p in prompts]

    def close(self) -> None:
        self.closed = True


def _spinners() -> int:
    count = 0
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        count += speed.SPIN.encode() in cmdline
    return count


def test_a_busy_core_stops_when_its_parent_is_killed() -> None:
    # killed by a signal, the replay runs no `finally`: the spinner must notice on its own
    parent = subprocess.Popen(
        [sys.executable, "-c", "import os, subprocess, sys, time\n"
         f"subprocess.Popen([sys.executable, '-c', {speed.SPIN!r}, str(os.getpid())], "
         "stdout=subprocess.DEVNULL)\n"
         "time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while _spinners() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _spinners() == 1
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while _spinners() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _spinners() == 0


def test_each_setting_loads_a_model_beside_its_busy_cores_and_closes_it() -> None:
    prompts = [ChatPrompt(messages=[{"role": "user", "content": "x"}], seed=s) for s in (1, 2, 3)]
    models: list[FakeLLM] = []

    def load(threads: int) -> FakeLLM:
        models.append(FakeLLM(threads))
        return models[-1]

    results = list(speed.measure(prompts, [(1, 0), (2, 1)], load))
    assert [(t, b) for t, b, _ in results] == [(1, 0), (2, 1)]
    assert [m.spinners for m in models] == [0, 1] and all(m.closed for m in models)
    assert _spinners() == 0  # the busy core stops with its setting
    two = speed.summary(results[1][2])
    assert two == {"programs": 3, "median_seconds": 4.0, "median_completion_tokens": 20,
                   "median_seconds_after_first": 5.0, "first_seconds": 2.0}
    text = speed.table(results)
    assert "| 2 | 1 | 3 | 4.0 | 20 | 5.0 | 2.0 |" in text.splitlines()
