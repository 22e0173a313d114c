"""benchmarks/closing.py: the final selection timed on a finished run's kept predictions."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.closing import main, measure
from engine.records.runs import open_run
from tests.test_outputs import scripted_run


def test_the_selection_is_timed_on_a_finished_run(tmp_path_factory: pytest.TempPathFactory,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run = scripted_run(tmp_path_factory)
    row = measure(run)
    stored = open_run(run)
    # The winner is the run's own choice: it selected with --select confirmed too.
    assert row["winner"] == stored.manifest["selection"]["winner"]
    assert row["nodes"] == len(stored.journal) and row["metric"] == stored.task().metric.name
    assert row["confirmed_seconds"] > 0
    assert row["recorded_closing_seconds"] == stored.manifest["spent"]["closing_seconds"]
    if row["operator"] != "ensemble":  # the run makes no ensemble: nothing to cross-fit
        assert row["cross_fitted"] is None and row["cross_fitted_seconds"] is None
    capsys.readouterr()  # the run's own log, when this test made it
    assert main([str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | metric | nodes | answer |") and len(lines) == 3
    assert lines[2].startswith(f"| {run.name} | {row['metric']} | {row['nodes']} |")


def test_a_folder_that_is_not_a_run_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a run directory" in err and "\n" not in err
