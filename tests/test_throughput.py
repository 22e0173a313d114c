"""benchmarks.throughput: the sample of a data set, its bad flags, and the whole measurement on
a small data set (a real search without an LLM, its floor trials replayed in a bare loop)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import throughput
from benchmarks.datasets import REGISTRY


def test_a_sample_has_at_most_the_rows_asked_and_is_the_same_each_time(tmp_path: Path) -> None:
    wine = REGISTRY["wine-quality-white"]
    path = throughput.sample(wine, 500, tmp_path)
    first = pd.read_csv(path)
    assert len(first) == 500 and path.name == "wine-quality-white-500.csv"
    assert pd.read_csv(throughput.sample(wine, 500, tmp_path / "again")).equals(first)
    whole = pd.read_csv(throughput.sample(REGISTRY["penguins"], 10_000, tmp_path))
    assert len(whole) == len(pd.read_csv(REGISTRY["penguins"].path))


def test_bad_flags_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    assert throughput.main(["--checkout", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "no engine/run.py there" in capsys.readouterr().err
    assert throughput.main(["--rows", "5", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "report.md").exists()


@pytest.mark.slow
def test_the_floor_trials_of_a_search_are_replayed_in_a_bare_loop(tmp_path: Path) -> None:
    assert throughput.main(["--suite", "concrete-strength", "--rows", "400", "--budget", "30s",
                            "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "results.json").read_text())
    assert row["dataset"] == "concrete-strength" and row["rows"] == 320  # 80 % are dev rows
    assert row["trials"] >= 3 and row["bare_seconds"] > 0
    # the bare loop runs the same trials on one core in less than the cores' time the search had
    assert 0 < row["share"] < row["search_share"] < 1  # start-up and the answer cost too
    assert row["search_seconds"] < row["wall_seconds"]
    assert row["engine_trials_per_core_minute"] < row["bare_trials_per_core_minute"]
    assert "| concrete-strength | 320 |" in (tmp_path / "report.md").read_text()
