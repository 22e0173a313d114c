"""benchmarks/program_gates.py: scored feature programs grouped by their gates, against what
the same comparison gave on the test rows; runs faked (open_run reads a real one in
tests/test_runs.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

import benchmarks.program_gates as gates
from search.journal import Journal
from search.node import Operator
from search.programs import Gate
from tests.helpers import make_node


def _program(node_id: str, gains: tuple[float, ...], kept: bool):
    return dataclasses.replace(make_node(node_id, operator=Operator.FEATURES),
                               gate=Gate("ref", gains, kept, "").to_json())


def test_programs_are_grouped_by_their_gains_and_judged_on_the_test_rows(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for run in ("a/runs/x", "b", "c/no-task"):
        (tmp_path / run).mkdir(parents=True)
        (tmp_path / run / "manifest.json").write_text("{}")
    for run in ("a/runs/x", "b"):
        (tmp_path / run / "task").mkdir()
    assert gates.run_dirs([tmp_path]) == [tmp_path / "a/runs/x", tmp_path / "b"]
    assert gates.run_dirs([tmp_path / "b"]) == [tmp_path / "b"]
    five = (0.1, 0.1, 0.1, 0.1, 0.1)  # today's rule keeps it
    four = (0.1, 0.1, 0.1, 0.1, -0.1)  # one group short
    three = (0.1, 0.1, 0.1, -0.01, -0.01)  # two groups short
    nodes = [make_node("ref", operator=Operator.TUNE), _program("k", five, kept=True),
             _program("t", five, kept=False),  # refused by an older, stricter rule
             _program("f", four, kept=True),  # kept by an older, looser rule
             _program("s", three, kept=False), _program("l", (-0.1,) * 5, kept=False),
             _program("untested", five, kept=True)]
    # rmse: lower is better; the reference tests 10
    tests = {"ref": 10.0, "k": 9.0, "t": 9.5, "f": 10.1, "s": 10.5, "l": 10.2,
             "untested": None}
    monkeypatch.setattr(gates, "open_run", lambda run: SimpleNamespace(
        manifest={"metric": "rmse"}, journal=Journal(nodes), tests=tests))
    programs = {p.node_id: p for p in gates.scored_programs(tmp_path / "b")}
    assert set(programs) == {"k", "t", "f", "s", "l"}  # a program with no test score is left out
    assert programs["k"].test_gain == pytest.approx(1.0)
    assert programs["s"].relative_test_gain == pytest.approx(-0.05)
    text = gates.table(list(programs.values()))
    assert text.startswith("5 scored programs in 1 runs")
    assert "| kept by the run | 2 | 1 (50%) | +4.500% |" in text
    assert "| not kept by the run | 3 | 1 (33%) | -2.000% |" in text
    assert "| kept by today's rule (better on every group) | 2 | 2 (100%) | +7.500% |" in text
    assert "| not kept by today's rule | 3 | 0 (0%) | -2.000% |" in text
    assert "| positive mean, better on all groups but one | 1 | 0 (0%) | -1.000% |" in text
    assert "| positive mean, better on fewer groups | 1 | 0 (0%) | -5.000% |" in text
    assert "| mean gain at most zero | 1 | 0 (0%) | -2.000% |" in text


def test_no_program_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert gates.main([str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert gates.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no scored feature program with test scores" in err and "\n" not in err
