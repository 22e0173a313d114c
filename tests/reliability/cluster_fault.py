"""Run by test_cluster_fault in its own process (Ray fixes auth and cluster settings once per
process): a simulated 3-node cluster (an LLM node declaring `llm`, two executor nodes
declaring `executor`, a head with no CPUs), actors started by the engine's own
`start_workers` with `--llm-resource llm --executor-resource executor`, the real loop, and one
executor node removed mid-run.

`python -m tests.reliability.cluster_fault OUT.json` writes what happened as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import ray

from benchmarks.scaling import ClusterLayout, make_task, simulated_cluster
from engine.budget import Budget
from engine.config import RunConfig
from engine.loop import SearchLoop
from engine.placement import llm_options, start_workers
from engine.records.store import RunStore
from engine.search_context import SearchContext
from engine.search_run import task_context
from engine.sides import ExecutorSide, LlmSide
from sandbox import Limits
from search.journal import Journal
from search.policy import make_policy
from tests.reliability._rig import pending, replies, write_replies


def main(out: Path) -> None:
    layout = ClusterLayout(exec_nodes=2, exec_slots_per_node=4, llm_nodes=1, llm_slots_per_node=2,
                           node_cpus=4, exec_resource="executor", llm_resource="llm")
    tmp = Path(tempfile.mkdtemp(prefix="relcluster-"))
    task = make_task(tmp / "data", rows=60)
    spec = write_replies(tmp / "r.json", replies("n", 40, 3.0), delay=0.05)
    # One replica serving two requests at once: replicas of a scripted LLM would replay the
    # same replies, and the duplicate guard would skip the second copy of each.
    config = RunConfig(data=tmp / "data" / "train.csv", target="y", llm=spec, llm_replicas=1,
                       llm_concurrency=2, executors=4, llm_resource="llm",
                       executor_resource="executor").validate()
    with simulated_cluster(layout) as cluster:
        workers = start_workers(config, llm_options(config))
        # Warm-up: actor processes up, the sandbox's one-time isolation probe done.
        ray.get([e.run.remote("import sys\n", {}, Limits(wall_seconds=60.0))
                 for e in workers.executors], timeout=300)
        nodes = {n.node_id: n for n in cluster.list_all_nodes()}
        declared = {n["NodeID"]: n["Resources"] for n in ray.nodes()}
        kind = {node_id: ("head" if n is cluster.head_node else
                          "llm" if "llm" in declared[node_id] else "executor")
                for node_id, n in nodes.items()}
        llm_actors = [a for pool in workers.pools for a in pool.actors.values()]
        placed = {
            "llm": [kind[i] for i in ray.get([a.node_id.remote() for a in llm_actors])],
            "executors": [kind[i] for i in ray.get([e.node_id.remote()
                                                     for e in workers.executors])],
        }
        store = RunStore.create(tmp / "runs", task, {"starts": [], "spent": {}})
        journal = Journal()
        arguments = workers.loop_arguments()
        restarted: list[str] = []

        def restart_executor(dead: Any) -> Any:
            replacement = workers.restart_executor(dead)
            restarted.append(ray.get(replacement.node_id.remote(), timeout=120))
            return replacement

        arguments["restart_executor"] = restart_executor
        loop = SearchLoop(
            search=SearchContext(task, task_context(task, 0), journal, exec_timeout=60.0),
            store=store, policy=make_policy("greedy", seed=0, num_drafts=12),
            budget=Budget(200.0, 12),
            llm=LlmSide.of(arguments, route=config.routes.spec_for, timeout=600.0),
            executors=ExecutorSide.of(arguments),
        )
        exec_nodes = [n for n in nodes.values() if kind[n.node_id] == "executor"]
        removed: dict[str, object] = {}

        async def remove_busy_node(loop: SearchLoop) -> None:
            while len(pending(loop, "exec")) < 4 or len(loop.journal) < 1:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # mid-node: each candidate sleeps 3 s
            busy = [worker for _, worker in pending(loop, "exec")]
            where = ray.get([w.node_id.remote() for w in busy], timeout=30)
            victim = next(n for n in exec_nodes if n.node_id in where)
            removed["in_flight_there"] = where.count(victim.node_id)
            removed["victim"] = victim.node_id
            await asyncio.to_thread(cluster.remove_node, victim)
            removed["done"] = True

        async def run() -> Any:
            side = asyncio.ensure_future(remove_busy_node(loop))
            try:
                return await loop.run()
            finally:
                if "victim" in removed:  # the removal began: let it finish (slow under load)
                    await asyncio.wait_for(side, timeout=180)
                side.cancel()

        stats = asyncio.run(run())
        stored, _ = RunStore.open(store.root).read_nodes()
        result = {
            "placed": placed,
            "removed": removed,
            "restarted_on": [kind[i] for i in restarted],
            "restarted_on_victim": sum(1 for i in restarted if i == removed.get("victim")),
            "stopped_by": stats.stopped_by,
            "lost": stats.lost,
            "statuses": [n.status.value for n in journal],
            "errors": [n.error for n in journal if n.error],
            "stored": [n.node_id for n in stored],
            "journal": [n.node_id for n in journal],
            "llm_actors": sorted({n.llm_actor for n in journal}),
            "in_flight_notes": len(list((store.root / "inflight").glob("*.json"))),
            "exec_restarts": len(restarted),
            "requeued_ran": sum(1 for n in journal if n.executor.startswith("exec-r")),
        }
        workers.close()
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
