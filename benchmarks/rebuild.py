"""Journal rebuild benchmark: how long a resume takes to read 10,000 stored nodes back.

Stores synthetic nodes one Parquet part each (as a run appends them), then times
RunStore.read_nodes and Journal(nodes), and the read's steps one by one. Run by
`python -m benchmarks.scaling` beside the scaling measurement; the target is REBUILD_TARGET_S.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.records.store import RunStore
from engine.task.prepare import PreparedTask
from search.journal import Journal
from search.node import Node, Operator, Status

REBUILD_TARGET_S = 2.0


@dataclass
class RebuildResult:
    nodes: int
    append_ms_per_node: float  # RunStore.append, fsync included
    read_nodes_seconds: float  # RunStore.read_nodes()
    journal_seconds: float  # Journal(nodes)
    total_seconds: float
    # read_nodes, step by step (the same calls, timed apart)
    list_parts_seconds: float
    parquet_read_seconds: float  # pyarrow dataset over every part -> one table
    rows_seconds: float  # to_pylist, NaN -> None, sort
    from_record_seconds: float  # Node.from_record per row
    parts: int


def synthetic_nodes(count: int, seed: int = 0) -> Iterator[tuple[Node, float | None]]:
    """A plausible tree: a few drafts, then improves of good nodes and debugs of buggy ones."""
    rng = random.Random(seed)
    ok_ids: list[str] = []
    buggy_ids: list[str] = []
    body = "".join(f"feature_{k} = frame['x{k}'] * {k}\n" for k in range(40))  # ~1.2 kB
    for step in range(count):
        node_id = f"{step:06d}{rng.getrandbits(24):06x}"
        if step < 5 or not ok_ids:
            operator, parent = Operator.DRAFT, None
        elif buggy_ids and rng.random() < 0.3:
            operator, parent = Operator.DEBUG, rng.choice(buggy_ids)
        else:
            operator, parent = Operator.IMPROVE, rng.choice(ok_ids[-50:])
        failed = rng.random() < 0.25
        metric = None if failed else -rng.uniform(1.0, 5.0)
        code = f"# node {node_id}\n{body}"
        node = Node(
            node_id=node_id, parent_id=parent, operator=operator,
            status=Status.BUGGY if failed else Status.OK, step=step, run_id="rebuild",
            policy="greedy", plan=f"plan for {node_id}", code=code, code_hash=node_id,
            exit_code=1 if failed else 0, error="KeyError: 'x'" if failed else "",
            stdout_tail="valid rmse: 1.0\n" * 10, stderr_tail="trace\n" * 20 if failed else "",
            metric=metric, metric_raw=None if metric is None else -metric,
            exec_seconds=rng.uniform(1, 10), llm_seconds=rng.uniform(1, 5),
            prompt_tokens=1500, completion_tokens=400, temperature=0.7, model="scripted",
            llm_actor="llm-0", executor="exec-0", node_ip="127.0.0.1",
            created_at=1e9 + step, finished_at=1e9 + step + 1,
        )
        (buggy_ids if failed else ok_ids).append(node_id)
        yield node, None if metric is None else -metric * 1.1


def measure_rebuild(task: PreparedTask, workdir: Path, count: int = 10_000,
                    seed: int = 0) -> RebuildResult:
    """Store `count` nodes one part each, then time what a resume does to rebuild the Journal."""
    import pyarrow.dataset as ds

    from engine.records.store import SCHEMA

    store = RunStore.create(workdir / "rebuild", task, {"benchmark": "rebuild"})
    start = time.perf_counter()
    for node, test in synthetic_nodes(count, seed):
        store.append(node, test)
    append_ms = 1000 * (time.perf_counter() - start) / count

    start = time.perf_counter()
    nodes, _tests = store.read_nodes()
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    journal = Journal(nodes)
    journal_s = time.perf_counter() - start
    assert len(journal) == count

    # The same steps as RunStore.read_rows / read_nodes, timed one by one.
    t0 = time.perf_counter()
    parts = sorted(store.nodes_dir.glob("*.parquet"))  # chunks after compaction, plus parts
    t1 = time.perf_counter()
    table = ds.dataset([str(p) for p in parts], schema=SCHEMA, format="parquet").to_table()
    t2 = time.perf_counter()
    rows = [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in table.to_pylist()
    ]
    rows.sort(key=lambda r: (r["step"], r["node_id"]))
    for r in rows:
        r.pop("test_metric_raw")
    t3 = time.perf_counter()
    _ = [Node.from_record(r) for r in rows]
    t4 = time.perf_counter()
    return RebuildResult(
        nodes=count, append_ms_per_node=append_ms, read_nodes_seconds=read_s,
        journal_seconds=journal_s, total_seconds=read_s + journal_s,
        list_parts_seconds=t1 - t0, parquet_read_seconds=t2 - t1, rows_seconds=t3 - t2,
        from_record_seconds=t4 - t3, parts=len(parts),
    )


def rebuild_text(r: RebuildResult) -> str:
    verdict = "ok" if r.total_seconds < REBUILD_TARGET_S else "SLOWER than target"
    return (
        f"journal rebuild, {r.nodes} nodes in {r.parts} Parquet files: read_nodes "
        f"{r.read_nodes_seconds:.2f} s + Journal {r.journal_seconds:.3f} s = "
        f"{r.total_seconds:.2f} s (target < {REBUILD_TARGET_S:.0f} s: {verdict})\n"
        f"  breakdown: list parts {r.list_parts_seconds:.3f} s, parquet read "
        f"{r.parquet_read_seconds:.2f} s, rows {r.rows_seconds:.2f} s, Node.from_record "
        f"{r.from_record_seconds:.2f} s; append {r.append_ms_per_node:.2f} ms/node"
    )
