"""Load: 200 nodes through the real loop (scripted LLM, real sandbox) with 8 executors; the
driver's file descriptors, its process tree, the sandbox's temp dirs and private-uid processes
are the same after as before: nothing leaks per node."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from benchmarks.scaling import make_task
from search.node import Status
from tests.reliability._rig import (
    build_rig,
    check_stored_once,
    replies,
    sandbox_uid_processes,
    sandbox_workdirs,
    write_replies,
)

NODES = 200


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def counts() -> dict[str, int]:
    return {
        "driver_fds": len(os.listdir("/proc/self/fd")),
        "driver_tree": len(descendants(os.getpid())),
        "sandbox_dirs": len(sandbox_workdirs()),
        "sandbox_procs": len(sandbox_uid_processes()),
    }


def test_200_nodes_8_executors_no_leak(ray_local: None, tmp_path: Path) -> None:
    task = make_task(tmp_path / "data", rows=60)
    spec = write_replies(tmp_path / "r.json", replies("load", NODES))
    rig = build_rig(tmp_path, task, [spec], executors=8, max_nodes=NODES, seconds=600.0,
                    concurrency=4)
    before = counts()
    started = time.monotonic()
    stats = asyncio.run(rig.run())
    elapsed = time.monotonic() - started
    time.sleep(1.0)  # let the last sandbox sweeps finish
    after = counts()
    assert stats.stopped_by == "nodes or tokens"
    assert len(rig.journal) == NODES
    statuses = [n.status for n in rig.journal]
    assert statuses.count(Status.OK) == NODES, {s: statuses.count(s) for s in set(statuses)}
    assert len({n.executor for n in rig.journal}) == 8  # every executor served
    check_stored_once(rig)
    assert after["sandbox_dirs"] == before["sandbox_dirs"], (before, after)
    assert after["sandbox_procs"] == 0, (before, after)
    # A leak per node would show as hundreds; a few fds or workers may come and go with Ray.
    assert after["driver_fds"] <= before["driver_fds"] + 8, (before, after)
    assert after["driver_tree"] <= before["driver_tree"] + 4, (before, after)
    print(f"\n{NODES} nodes in {elapsed:.1f}s; before {before}; after {after}")
