"""Resume: a stopped run continues from its Parquet parts, manifest and in-flight notes.

The hard case runs the real CLI in a subprocess, SIGKILLs the driver mid-run, resumes it, and
checks that no finished node is lost or duplicated and that the run completes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from engine.records.store import RunStore
from engine.run import main
from search.node import Operator
from search.policy import Proposal
from tests.helpers import only_run, resume_task


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of 3 nodes; each test resumes its own copy (one search, not one each)."""
    tmp = tmp_path_factory.mktemp("three")
    task = resume_task(tmp, 0.0, 3)
    out = tmp / "runs"
    assert main(["--task", str(task), "--out", str(out)]) == 0
    return only_run(out)


def resumable_copy(run: Path, tmp: Path) -> Path:
    """A copy of the stopped run `run` under `tmp`, with its run id (its folder's name)."""
    return Path(shutil.copytree(run, tmp / run.name))


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_resume_after_node_budget(three_nodes: Path, tmp_path: Path) -> None:
    run = resumable_copy(three_nodes, tmp_path)
    first = pd.read_parquet(run / "nodes")
    assert len(first) == 3
    assert main(["--resume", str(run), "--max-nodes", "5", "--budget", "5m", "--quiet"]) == 0
    rows = pd.read_parquet(run / "nodes")
    assert len(rows) == 5 and rows.node_id.is_unique
    assert set(first.node_id) <= set(rows.node_id)
    assert sorted(rows.step) == list(range(5))
    manifest = RunStore.open(run).manifest()
    assert len(manifest["starts"]) == 2 and manifest["spent"]["nodes"] == 5
    assert manifest["spent"]["budget"] == 300 + 300


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_a_start_without_an_llm_keeps_the_llms_proposals_for_the_next(tmp_path: Path) -> None:
    task = resume_task(tmp_path, 0.0, 1)
    task.write_text(task.read_text().replace("baseline: false", "baseline: true"))
    out = tmp_path / "runs"
    assert main(["--task", str(task), "--out", str(out)]) == 0
    run = only_run(out)
    (root,) = pd.read_parquet(run / "nodes").node_id  # the baseline root
    left = Proposal(Operator.IMPROVE, root, 0.7)
    RunStore.open(run).mark_in_flight("left", left)  # as a killed start leaves it
    # No LLM: nothing can run the improvement, so it waits for a start with one.
    assert main(["--resume", str(run), "--llm", "none", "--max-nodes", "3", "--budget", "1m",
                 "--quiet"]) == 0
    assert list(pd.read_parquet(run / "nodes").node_id) == [root]
    assert RunStore.open(run).take_in_flight() == [left]


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_a_resume_that_keeps_the_answer_keeps_its_saved_model(
        three_nodes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = resumable_copy(three_nodes, tmp_path)
    model = json.loads((run / "best" / "model" / "model.json").read_text())
    assert model["saved"] is True
    capsys.readouterr()
    assert main(["--resume", str(run), "--max-nodes", "3", "--budget", "1m", "--quiet"]) == 0
    said = capsys.readouterr().out
    assert "its fitted models are kept" in said and "saving the answer's" not in said
    assert json.loads((run / "best" / "model" / "model.json").read_text()) == model
    assert RunStore.open(run).manifest()["selection"]["model"] == model


def test_resume_refuses_a_changed_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Any stored run will do: one node on the holdout is the cheapest (one sandbox process).
    task = resume_task(tmp_path, 0.0, 1, folds=1)
    out = tmp_path / "runs"
    assert main(["--task", str(task), "--out", str(out)]) == 0
    run = only_run(out)
    labels = run / "task" / "valid_labels.csv"
    lines = labels.read_text().splitlines()
    lines[1] += "1"
    labels.write_text("\n".join(lines) + "\n")
    assert main(["--resume", str(run), "--budget", "1m"]) == 2
    assert "changed" in capsys.readouterr().err
    assert main(["--resume", str(tmp_path), "--budget", "1m"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["--resume", str(run), "--target", "z"]) == 2


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_sigkill_mid_run_then_resume(tmp_path: Path) -> None:
    task = resume_task(tmp_path, 0.4, 10)
    out = tmp_path / "runs"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.run", "--task", str(task), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        parts: list[Path] = []
        while time.monotonic() < deadline and len(parts) < 3:
            time.sleep(0.2)
            parts = list(out.glob("*/nodes/part-*.parquet"))
        assert len(parts) >= 3, "the run never stored 3 nodes"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        # The driver is gone; take its local Ray processes with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    run = only_run(out)
    before = pd.read_parquet(run / "nodes")
    in_flight = list((run / "inflight").glob("*.json"))
    assert main(["--resume", str(run), "--budget", "3m", "--quiet"]) == 0
    after = pd.read_parquet(run / "nodes")
    assert set(before.node_id) <= set(after.node_id), "a finished node was lost"
    assert after.node_id.is_unique, "a node was stored twice"
    assert len(after) == 10, "the run did not complete its node budget"
    assert not list((run / "inflight").glob("*.json"))
    manifest = RunStore.open(run).manifest()
    assert len(manifest["starts"]) == 2
    # What was in flight at the kill was proposed again: same (operator, parent) pairs appear.
    for note in in_flight:
        data = json.loads(note.read_text()) if note.exists() else None
        assert data is None or data["operator"] in set(after.operator)


@pytest.mark.slow  # whole searches, over 20 s: the slow step
@pytest.mark.timing  # selection and saving must end within 60 s of Ctrl-C
def test_ctrl_c_stops_gracefully(tmp_path: Path) -> None:
    task = resume_task(tmp_path, 0.4, 40)
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.run", "--task", str(task), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        # A shell without job control starts background jobs with SIGINT ignored, and Python
        # keeps it so; a terminal user's Ctrl-C always arrives, so restore that here.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(out.glob("*/nodes/part-*"))) < 2:
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "finished nodes are stored" in err
    run = only_run(out)
    rows = pd.read_parquet(run / "nodes")
    assert len(rows) >= 2 and rows.node_id.is_unique
    manifest = RunStore.open(run).manifest()
    assert manifest["spent"]["stopped_by"] == "user"
    assert "stopped by user" in (run / "summary.md").read_text()
    # Whatever was cut short is marked, so a resume proposes it again.
    stopped = rows[rows.error == "stopped by the user"]
    assert len(list((run / "inflight").glob("*.json"))) == len(stopped)
