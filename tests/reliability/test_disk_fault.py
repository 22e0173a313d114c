"""A Parquet part that cannot be written (disk full, I/O error) stops the run with one clear
line and exit 1; every node finished before is kept, the store opens cleanly, and a resume
re-proposes what was in flight and completes the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.records.store import RunStore
from engine.run import main
from search.node import Node
from tests.helpers import only_run, resume_task


def test_failed_part_write_stops_cleanly_then_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    task = resume_task(tmp_path, 0.0, 4, folds=1)  # the store and resume, not the scoring
    out = tmp_path / "runs"
    real_append = RunStore.append
    calls: list[str] = []

    def failing_append(self: RunStore, node: Node, test_raw: float | None) -> Any:
        calls.append(node.node_id)
        if len(calls) == 3:  # the third node meets a full disk, once
            raise OSError(28, "No space left on device")
        return real_append(self, node, test_raw)

    monkeypatch.setattr(RunStore, "append", failing_append)
    assert main(["--task", str(task), "--out", str(out)]) == 1
    # Ray may warn on stderr as it starts; the engine's own answer is one line, the last.
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: cannot store node") and "No space left" in err, err
    assert "--resume" in err
    monkeypatch.setattr(RunStore, "append", real_append)

    run = only_run(out)
    nodes, _ = RunStore.open(run).read_nodes()  # opens cleanly: whole parts only
    assert [n.node_id for n in nodes] == calls[:2]
    assert not list((run / "nodes").glob(".*.tmp")), "a torn temp part was left"
    notes = list((run / "inflight").glob("*.json"))
    assert calls[2] in {p.stem for p in notes}, "the unstored node must stay in flight"

    assert main(["--resume", str(run), "--budget", "5m", "--quiet"]) == 0
    rows = pd.read_parquet(run / "nodes")
    assert rows.node_id.is_unique and len(rows) == 4
    assert set(calls[:2]) <= set(rows.node_id)
    assert calls[2] not in set(rows.node_id)  # never stored: re-proposed under a new id
    assert not list((run / "inflight").glob("*.json"))
