"""The large-data tools of benchmarks/: the generated table, the process-tree memory reading,
the fit-cost runs through the real sandbox, and benchmarks.big_data end to end on a small
table (a real search without an LLM, and LightGBM's defaults beside it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import big_data, fit_cost


def test_the_generated_table_is_the_same_for_a_seed_and_holds_both_classes() -> None:
    first, again = big_data.generate(2_000, seed=3), big_data.generate(2_000, seed=3)
    assert first.equals(again)
    assert not first.equals(big_data.generate(2_000, seed=4))
    assert list(first.columns) == [*(f"x{i}" for i in range(16)), "segment", "region",
                                   big_data.TARGET]
    assert 0.2 < first[big_data.TARGET].mean() < 0.8
    assert set(first["segment"]) == set(big_data.LEVELS)
    assert first["x9"].isna().any() and not first["x0"].isna().any()


def test_the_table_is_written_once_in_train_and_test(tmp_path: Path) -> None:
    train, test = big_data.write_table(1_000, 0, tmp_path)
    written = train.stat().st_mtime_ns
    assert big_data.write_table(1_000, 0, tmp_path) == (train, test)
    assert train.stat().st_mtime_ns == written
    assert len(train.read_text().splitlines()) - 1 == 800
    assert len(test.read_text().splitlines()) - 1 == 200


def test_the_tree_memory_counts_a_child_process() -> None:
    alone = big_data.tree_rss(os.getpid())
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time; b = bytearray(200 * 2**20); "
                              "sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        assert big_data.tree_rss(os.getpid()) > alone + 150 * 2**20
    finally:
        child.kill()
        child.wait()


def test_fit_cost_times_each_configuration_in_the_sandbox(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    assert fit_cost.main(["--rows", "300", "--test-rows", "100", "--families", "linear",
                          "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [r["name"] for r in records] == ["baseline", "linear"]
    assert all(r["status"] == "ok" and r["seconds"] > 0 and r["rows"] == 300 for r in records)


def test_bad_flags_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown peers"):
        big_data.main(["--rows", "1000", "--peers", "nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="at least 100"):
        big_data.main(["--rows", "10", "--out", str(tmp_path)])
    assert not (tmp_path / "results.json").exists()


@pytest.mark.slow
def test_a_small_table_searched_and_compared_with_lightgbm(tmp_path: Path) -> None:
    assert big_data.main(["--rows", "3000", "--budget", "40s", "--llm", "none",
                          "--executors", "1", "--peers", "lgbm", "--out", str(tmp_path)]) == 0
    rows = {row["method"]: row for row in json.loads((tmp_path / "results.json").read_text())}
    search, peer = rows["treeml"], rows["lgbm"]
    assert search["exit"] == 0 and search["peak_rss_gib"] > 0.05
    assert 0.5 < search["test"] <= 1.0 and 0.5 < peer["test"] <= 1.0
    assert search["ok_nodes"] >= 2
    assert "| treeml |" in (tmp_path / "report.md").read_text()
