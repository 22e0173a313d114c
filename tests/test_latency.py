"""benchmarks/latency.py: its figures from hand-made timings, then the whole benchmark on the
shared scripted run (every way but AutoGluon, which needs the bench venv)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import engine.predict
from benchmarks.latency import BIG_ROWS, SERVED_STEPS, answers, main, report, timed_steps, way
from tests.test_outputs import scripted_run


def test_a_way_gives_p50_p99_and_the_median_of_the_big_calls() -> None:
    record = way(2.0, [0.1 * i for i in range(1, 101)], 9.0, [3.0, 1.0, 2.0])
    assert record["p50_one"] == pytest.approx(5.05) and record["p99_one"] == pytest.approx(9.901)
    assert record["median_big"] == 2.0 and record["cold_one"] == 2.0


def test_the_report_shows_every_way_and_says_which_was_skipped() -> None:
    results = {
        "dataset": "d", "date": "today", "run": "r", "answer": "a", "machine": "m",
        "load": [5.0, 4.0], "calls": 3, "cli_calls": 1, "big_calls": 1,
        "ways": {"api": way(1.5, [0.25, 0.5, 0.75], 4.0, [2.0]),
                 "autogluon": {"skipped": "skipped: no bench venv at x"}},
    }
    text = report(results, "python -m benchmarks.latency --x")
    assert "| api | 1,500 ms | 500 ms | 745 ms | 4,000 ms | 2,000 ms |" in text
    assert "| autogluon | skipped: no bench venv at x |" in text
    assert "load average 5.0 at the start, 4.0 at the end" in text
    assert "python -m benchmarks.latency --x" in text


def test_the_served_steps_are_timed_while_inside_and_restored_after() -> None:
    original = engine.predict.csv_bytes
    with timed_steps() as seconds:
        assert engine.predict.csv_bytes is not original
        engine.predict.csv_bytes(pd.DataFrame({"a": [1, 2]}))
        engine.predict.csv_bytes(pd.DataFrame({"a": [3]}))
    assert engine.predict.csv_bytes is original  # restored
    assert set(seconds) == set(SERVED_STEPS) and len(seconds["rows to CSV"]) == 2
    assert all(s > 0 for s in seconds["rows to CSV"]) and seconds["request"] == []
    with pytest.raises(ValueError), timed_steps():
        raise ValueError("a failing call restores them too")
    assert all(getattr(owner, attr).__name__ != "call" for owner, attr in SERVED_STEPS.values())


@pytest.mark.slow
def test_the_benchmark_times_each_way_on_a_finished_run(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    run = scripted_run(tmp_path_factory)
    argv = ["--run", str(run), "--calls", "2", "--cli-calls", "1", "--big-calls", "1",
            "--bench-python", str(tmp_path / "none"), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    timed = [r for r in results["ways"].values() if "skipped" not in r]
    assert len(timed) == 3
    for record in timed:
        assert len(record["warm_one"]) in (1, 2) and len(record["warm_big"]) == 1
        assert 0 < record["p50_one"] <= record["p99_one"] and record["cold_big"] > 0
    assert "skipped" in results["ways"]["autogluon (TabularPredictor.predict)"]
    assert f"{BIG_ROWS:,} rows, warm" in (tmp_path / "out" / "report.md").read_text()
    # --answers: one row a run, with the load().predict p50 of its answer
    (header, _, row) = answers([run, run], 2, gap=0.01).splitlines()[:3]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == run.name and float(cells[5]) > 0 and "p50" in header
    # the session's request and the engine's steps, each within the call
    assert 0 < float(cells[7]) < float(cells[5]) and 0 < float(cells[8]) < float(cells[5])
    assert "reply read" in cells[9] and "rows checked" in cells[9]
