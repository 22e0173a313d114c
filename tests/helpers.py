"""Small builders shared by the pure unit tests."""

from __future__ import annotations

import os
from pathlib import Path

from search.node import Node, Operator, Status


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
