"""Run by test_cluster_fault in its own process (Ray fixes auth and cluster settings once per
process): a simulated cluster, the real loop, and one executor node removed mid-run.

`python -m tests.reliability.cluster_fault OUT.json` writes what happened as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import ray

from benchmarks.scaling import (
    EXEC_RESOURCE,
    LLM_RESOURCE,
    ClusterLayout,
    make_task,
    simulated_cluster,
)
from engine.loop import SearchLoop
from engine.store import RunStore
from tests.reliability._rig import build_rig, pending, replies, write_replies


def main(out: Path) -> None:
    layout = ClusterLayout(exec_nodes=2, exec_slots_per_node=4, llm_nodes=1, llm_slots_per_node=2,
                           node_cpus=4)
    tmp = Path(tempfile.mkdtemp(prefix="relcluster-"))
    task = make_task(tmp / "data", rows=60)
    spec = write_replies(tmp / "r.json", replies("n", 40, 3.0), delay=0.05)
    with simulated_cluster(layout) as cluster:
        rig = build_rig(tmp, task, [spec], executors=4, max_nodes=12, seconds=200.0,
                        exec_resources={EXEC_RESOURCE: 1}, llm_resources={LLM_RESOURCE: 1},
                        spread=True)
        exec_nodes = [n for n in cluster.list_all_nodes()
                      if n.node_id != cluster.head_node.node_id][:layout.exec_nodes]
        removed: dict[str, object] = {}

        async def remove_busy_node(loop: SearchLoop) -> None:
            while len(pending(loop, "exec")) < 4 or len(loop.journal) < 1:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # mid-node: each candidate sleeps 3 s
            busy = [worker for _, worker in pending(loop, "exec")]
            where = ray.get([w.node_id.remote() for w in busy], timeout=30)
            victim = next(n for n in exec_nodes if n.node_id in where)
            removed["in_flight_there"] = where.count(victim.node_id)
            await asyncio.to_thread(cluster.remove_node, victim)
            removed["done"] = True

        stats = asyncio.run(rig.run(remove_busy_node))
        nodes, _ = RunStore.open(rig.store.root).read_nodes()
        result = {
            "removed": removed,
            "stopped_by": stats.stopped_by,
            "lost": stats.lost,
            "statuses": [n.status.value for n in rig.journal],
            "errors": [n.error for n in rig.journal if n.error],
            "stored": [n.node_id for n in nodes],
            "journal": [n.node_id for n in rig.journal],
            "in_flight_notes": len(list((rig.store.root / "inflight").glob("*.json"))),
            "exec_restarts": rig.exec_restarts,
            "requeued_ran": sum(1 for n in rig.journal if n.executor.startswith("exec-r")),
        }
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
