"""Smoke test of the scaling benchmark's plumbing on a tiny simulated cluster.

Two executors, one-second nodes, four nodes: checks that the benchmark builds a cluster,
places actors by custom resources, runs the real loop and reports sane numbers. It checks the
plumbing, not the timing targets (those are what `python -m benchmarks.scaling` reports).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.rebuild import measure_rebuild
from benchmarks.scaling import make_task
from engine.task.prepare import PreparedTask


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    return make_task(tmp_path_factory.mktemp("scaling-data"), rows=60)


def test_scaling_point_runs_on_the_cluster(tmp_path: Path) -> None:
    # Its own process: Ray fixes auth and cluster settings once per process, and other tests
    # in this session start private local clusters.
    out = tmp_path / "scaling.json"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.scaling", "--executors", "2", "--node-seconds", "1",
         "--nodes-per-run", "4", "--llm-delay", "0.05", "--rebuild-nodes", "40",
         "--json", str(out)],
        check=True, timeout=300,
        # Ray leaves RAY_* variables of the clusters other tests started in this process.
        env={k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
    )
    results = json.loads(out.read_text())
    (point,) = results["scaling"]
    assert 0 < point["ok_nodes"] <= point["planned_nodes"] == 4
    assert 0 < point["efficiency"] <= 1.2
    assert point["mean_exec_seconds"] >= 1.0  # the candidates really slept in the sandbox
    assert point["overhead_ms_per_node"] > 0
    assert point["duplicates"] == 0 and point["lost"] == 0
    assert results["rebuild"]["nodes"] == 40


def test_rebuild_timing_structure(task: PreparedTask, tmp_path: Path) -> None:
    result = measure_rebuild(task, tmp_path, count=40)
    assert result.nodes == result.parts == 40
    assert result.total_seconds > 0
    assert result.total_seconds == pytest.approx(result.read_nodes_seconds
                                                 + result.journal_seconds)
