"""Small builders and data shared by the tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from search.node import Node, Operator, Status

SCRIPT = Path(__file__).parent / "data" / "scripted_regression.json"


def make_data(path: Path, rows: int = 300) -> None:
    """A small regression CSV: y = 3a^2 + b + noise, with a useless column c."""
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, rows))
    y = 3 * a**2 + b + 0.1 * rng.normal(size=rows)
    pd.DataFrame({"a": a, "b": b, "c": c, "y": y}).to_csv(path, index=False)


def make_node(node_id: str, parent_id: str | None = None, *, operator: Operator | None = None,
              status: Status = Status.OK, metric: float | None = 1.0, step: int = 0,
              code: str = "print(1)\n", exec_seconds: float = 1.0) -> Node:
    if operator is None:
        operator = Operator.DRAFT if parent_id is None else Operator.IMPROVE
    ok = status is Status.OK
    return Node(
        node_id=node_id, parent_id=parent_id, operator=operator, status=status, step=step,
        code=code + f"# {node_id}\n" if code else "", code_hash=node_id,
        metric=metric if ok else None,
        metric_raw=metric if ok else None, exec_seconds=exec_seconds,
    )


def processes_with(marker: str) -> list[int]:
    """Live pids whose command line holds `marker` (this process excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


def resume_task(tmp: Path, delay: float, max_nodes: int, folds: int | None = None) -> Path:
    """A task.yaml of a scripted run of `max_nodes` nodes, each reply after `delay` seconds;
    scored on `folds` folds (None: the engine's default)."""
    make_data(tmp / "train.csv")
    script = json.loads(SCRIPT.read_text())
    script["delay"] = delay
    (tmp / "replies.json").write_text(json.dumps(script))
    (tmp / "task.yaml").write_text(
        "data: train.csv\ntarget: y\nllm: scripted:replies.json\nnum_drafts: 2\n"
        f"max_nodes: {max_nodes}\nexecutors: 1\nbudget: 5m\nquiet: true\nexec_timeout: 60\n"
        "baseline: false\nfloor: false\nensemble: false\n"
        + (f"folds: {folds}\n" if folds is not None else "")
    )
    return tmp / "task.yaml"


def only_run(out: Path) -> Path:
    """The one run directory under `out`."""
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    return run
