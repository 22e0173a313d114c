"""Scaling benchmark: does the search loop keep 1..16 executors busy on a multi-node cluster?

    python -m benchmarks.scaling [--executors 1,2,4,8,16] [--node-seconds 6]
                                 [--nodes-per-run N] [--llm-delay 0.2] [--json FILE]

Builds a simulated cluster on this machine with `ray.cluster_utils.Cluster` (a head with no
CPUs, two executor nodes declaring `exec_slot`, one LLM node declaring `llm_slot`), then for
each executor count E runs the real `SearchLoop` (real sandbox, driver scoring, Parquet store)
with a scripted LLM whose every reply is a cheap stdlib script that sleeps `node_seconds` and
writes a constant submission. Each reply differs (a comment and a constant), so the duplicate
guard never skips one, and each LLM replica replays its own script.

Per E it reports nodes/hour against two ideals: `E * 3600 / node_seconds` (the sleep alone) and
`E * 3600 / mean exec_seconds` (what the sandbox really took, so scheduling efficiency is
separated from the sandbox's own start-up cost), plus the loop's own overhead per node. It also
times a Journal rebuild from 10,000 stored nodes and prints the policies' spread.

A run stops proposing after `--nodes-per-run` nodes (default 8 waves: 8 * E) and the wall
clock is measured from the loop's start to its end; actor start-up and the sandbox's one-time
probe happen before that, in a warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import ray
from ray.cluster_utils import Cluster

from actors.workers import start_executors, start_llm_actors
from benchmarks.rebuild import measure_rebuild, rebuild_text
from benchmarks.spread import simulate_spread
from engine.budget import Budget
from engine.loop import SearchLoop
from engine.records.store import RunStore
from engine.search_context import SearchContext
from engine.search_run import task_context
from engine.sides import ExecutorSide, LlmSide
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from sandbox import Limits
from search.journal import Journal
from search.node import Node, Status
from search.policy import make_policy

EXEC_RESOURCE = "exec_slot"
LLM_RESOURCE = "llm_slot"
OPERATORS = ("draft", "improve", "debug")
OVERHEAD_TARGET_MS = 50.0

T = TypeVar("T")


# ---- the simulated cluster ---------------------------------------------------------------


@dataclass(frozen=True)
class ClusterLayout:
    """Worker nodes of the simulated cluster; CPUs are logical (the work is sleeping)."""

    exec_nodes: int = 2
    exec_slots_per_node: int = 8
    llm_nodes: int = 1
    llm_slots_per_node: int = 4
    node_cpus: int = 16
    object_store_bytes: int = 100 * 2**20
    exec_resource: str = EXEC_RESOURCE  # the custom resource executor nodes declare
    llm_resource: str = LLM_RESOURCE  # the custom resource LLM nodes declare


@contextmanager
def _alarm(seconds: float, what: str) -> Iterator[None]:
    """Raise TimeoutError in the main thread after `seconds`; Ray's node start-up registers
    signal handlers, so it cannot move to a helper thread."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"{what} did not finish within {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _with_timeout(fn: Callable[[], T], seconds: float, what: str) -> T:
    """Run `fn` in a thread and give up after `seconds` (Ray start-up can hang)."""
    pool = ThreadPoolExecutor(1)
    attempt = pool.submit(fn)
    try:
        return attempt.result(timeout=seconds)
    except FutureTimeout as exc:
        raise RuntimeError(f"{what} did not finish within {seconds:.0f} s") from exc
    finally:
        pool.shutdown(wait=False)


@contextmanager
def simulated_cluster(layout: ClusterLayout = ClusterLayout(),
                      timeout: float = 120.0) -> Iterator[Cluster]:
    """A head plus worker nodes on this machine, with the driver connected; always torn down.

    Call from the main thread (Ray's node start-up installs signal handlers).
    """
    previous = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # a local test cluster: no token auth
    cluster = Cluster(initialize_head=False)
    connected = False
    try:
        with _alarm(timeout, "starting the simulated Ray cluster"):
            cluster.add_node(num_cpus=0, include_dashboard=False,
                             object_store_memory=layout.object_store_bytes)
            for _ in range(layout.exec_nodes):
                cluster.add_node(num_cpus=layout.node_cpus,
                                 resources={layout.exec_resource: layout.exec_slots_per_node},
                                 object_store_memory=layout.object_store_bytes)
            for _ in range(layout.llm_nodes):
                cluster.add_node(num_cpus=layout.node_cpus,
                                 resources={layout.llm_resource: layout.llm_slots_per_node},
                                 object_store_memory=layout.object_store_bytes)
            cluster.wait_for_nodes(timeout=timeout)
        _with_timeout(
            lambda: ray.init(address=cluster.address, log_to_driver=False,
                             configure_logging=False),
            60.0, f"connecting to the cluster at {cluster.address}",
        )
        connected = True
        yield cluster
    finally:
        if connected or ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        if previous is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = previous


# ---- task and scripted LLM ---------------------------------------------------------------


def make_task(folder: Path, rows: int = 200, seed: int = 0) -> PreparedTask:
    """A small synthetic regression task, split by the engine's own `prepare_task`."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(2, rows))
    frame = pd.DataFrame({"a": a, "b": b, "y": 2 * a - b + 0.1 * rng.normal(size=rows)})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.csv"
    frame.to_csv(path, index=False)
    return prepare_task(TaskSpec(path, "y"), seed=seed)


def reply_text(node_seconds: float, tag: str, replica: int, index: int) -> str:
    """A reply whose script sleeps, then writes constant predictions with the stdlib only."""
    constant = round(0.5 + ((index * 37 + replica * 11) % 97) / 50.0, 3)
    code = (
        "import csv\n"
        "import time\n"
        f"# scripted {tag} reply {index} of replica {replica}\n"
        f"PREDICTION = {constant}\n"
        f"time.sleep({node_seconds!r})\n"
        "for name in ('valid', 'test'):\n"
        "    with open(f'input/{name}.csv', newline='') as handle:\n"
        "        rows = sum(1 for _ in csv.reader(handle)) - 1\n"
        "    with open(f'submission/{name}.csv', 'w', newline='') as handle:\n"
        "        handle.write('prediction\\n' + f'{PREDICTION}\\n' * rows)\n"
    )
    return f"Predict the constant {constant}.\n```python\n{code}```\n"


def write_script(path: Path, *, node_seconds: float, delay: float, replica: int,
                 replies: int) -> Path:
    """A ScriptedLLM file with `replies` distinct replies per operator."""
    script: dict[str, Any] = {
        tag: [reply_text(node_seconds, tag, replica, i) for i in range(replies)]
        for tag in OPERATORS
    }
    script["delay"] = delay
    path.write_text(json.dumps(script))
    return path


# ---- one scaling point -------------------------------------------------------------------


@dataclass
class ScalingResult:
    executors: int
    node_seconds: float
    planned_nodes: int
    wall_seconds: float  # the loop's start to its end
    ok_nodes: int  # finished ok before the deadline
    other_nodes: dict[str, int]  # status -> count of nodes that were not ok
    nodes_per_hour: float
    ideal_per_hour: float  # E * 3600 / node_seconds
    efficiency: float  # measured / ideal
    mean_exec_seconds: float
    sandbox_overhead_seconds: float  # mean exec_seconds - node_seconds
    exec_ideal_per_hour: float  # E * 3600 / mean exec_seconds
    exec_efficiency: float  # measured / exec ideal: the loop's scheduling efficiency
    busy_share: float  # sum of exec_seconds / (E * wall)
    mean_gap_seconds: float  # an executor's idle time between two of its nodes
    ramp_seconds: float  # loop start to the first execution's start, mean over executors
    tail_seconds: float  # an executor's last finish to the loop's end, mean
    mean_queue_seconds: float  # code waiting for a free executor
    mean_llm_seconds: float
    overhead_ms_per_node: float  # LoopStats.overhead_seconds / nodes
    stopped_by: str
    duplicates: int
    lost: int


def measure_scaling(task: PreparedTask, executors: int, workdir: Path, *,
                    node_seconds: float = 6.0, nodes: int | None = None,
                    llm_delay: float = 0.2, llm_actors: int = 2, llm_concurrency: int = 8,
                    policy: str = "greedy", seed: int = 0,
                    wall_seconds: float | None = None) -> ScalingResult:
    """Run the real SearchLoop with E executors on the connected Ray cluster and measure it.

    Needs Ray connected and `exec_slot` / `llm_slot` resources for E executors and
    `llm_actors` LLM actors. `nodes` defaults to 8 waves (8 * E).
    """
    planned = nodes if nodes is not None else 8 * executors
    waves = math.ceil(planned / executors)
    if wall_seconds is None:  # a safety net: the node count should end the run first
        wall_seconds = 2 * waves * (node_seconds + 1.0 + llm_delay) + 60.0
    workdir.mkdir(parents=True, exist_ok=True)
    store = RunStore.create(workdir / "runs", task, {
        "benchmark": "scaling", "executors": executors, "node_seconds": node_seconds,
        "target": task.target, "task_type": task.task_type, "metric": task.metric.name,
        "starts": [], "spent": {},
    })
    replies = max(400, planned)
    scripts = [
        write_script(workdir / f"replies-{executors}-{r}.json", node_seconds=node_seconds,
                     delay=llm_delay, replica=r, replies=replies)
        for r in range(llm_actors)
    ]
    # One actor per script: replicas of one script would replay identical code (duplicates).
    llms = [
        start_llm_actors(f"scripted:{path}", 1, {}, concurrency=llm_concurrency, num_cpus=0,
                         resources={LLM_RESOURCE: 1})[0]
        for path in scripts
    ]
    execs = start_executors(executors, num_cpus=0, resources={EXEC_RESOURCE: 1})
    try:
        # Warm-up outside the measurement: actor processes, and the sandbox's one-time probe.
        warm = [actor.model.remote() for actor in llms]
        warm += [e.run.remote("import sys\n", {}, Limits(wall_seconds=60.0)) for e in execs]
        ray.get(warm, timeout=300)
        slots = [(actor, f"llm-{i}") for i, actor in enumerate(llms)
                 for _ in range(llm_concurrency)]
        journal = Journal()
        loop = SearchLoop(
            search=SearchContext(task, task_context(task, seed), journal,
                                 exec_timeout=4 * node_seconds + 30.0),
            store=store, policy=make_policy(policy, seed=seed),
            budget=Budget(wall_seconds, max_nodes=planned), llm=LlmSide(slots),
            executors=ExecutorSide(execs),
        )
        loop.budget.started = time.monotonic()
        start_wall, start = time.time(), time.perf_counter()
        stats = asyncio.run(loop.run())
        wall = time.perf_counter() - start
        end_wall = start_wall + wall
    finally:
        for actor in [*execs, *llms]:
            ray.kill(actor)
    return _summarise(journal, stats.overhead_seconds, stats.stopped_by, stats.duplicates,
                      stats.lost, executors=executors, node_seconds=node_seconds,
                      planned=planned, wall=wall, start_wall=start_wall, end_wall=end_wall)


def _summarise(journal: Journal, overhead: float, stopped_by: str, duplicates: int, lost: int,
               *, executors: int, node_seconds: float, planned: int, wall: float,
               start_wall: float, end_wall: float) -> ScalingResult:
    nodes = list(journal)
    ok = [n for n in nodes if n.status is Status.OK and n.finished_at <= end_wall]
    ok_ids = {n.node_id for n in ok}
    others: dict[str, int] = defaultdict(int)
    for n in nodes:
        if n.node_id not in ok_ids:
            others[n.status.value] += 1
    ran = [n for n in nodes if n.executor]  # reached an executor and came back
    mean_exec = statistics.fmean(n.exec_seconds for n in ran) if ran else 0.0
    per_hour = len(ok) / wall * 3600 if wall > 0 else 0.0
    ideal = executors * 3600 / node_seconds
    exec_ideal = executors * 3600 / mean_exec if mean_exec > 0 else 0.0
    # Per executor: start of each execution ~ finished_at - exec_seconds (driver clock).
    by_exec: dict[str, list[Node]] = defaultdict(list)
    for n in ran:
        by_exec[n.executor].append(n)
    gaps, ramps, tails = [], [], []
    for seq in by_exec.values():
        seq.sort(key=lambda n: n.finished_at)
        ramps.append(seq[0].finished_at - seq[0].exec_seconds - start_wall)
        tails.append(end_wall - seq[-1].finished_at)
        gaps += [b.finished_at - b.exec_seconds - a.finished_at for a, b in pairwise(seq)]
    return ScalingResult(
        executors=executors, node_seconds=node_seconds, planned_nodes=planned,
        wall_seconds=wall, ok_nodes=len(ok), other_nodes=dict(others),
        nodes_per_hour=per_hour, ideal_per_hour=ideal, efficiency=per_hour / ideal,
        mean_exec_seconds=mean_exec, sandbox_overhead_seconds=mean_exec - node_seconds,
        exec_ideal_per_hour=exec_ideal,
        exec_efficiency=per_hour / exec_ideal if exec_ideal else 0.0,
        busy_share=sum(n.exec_seconds for n in ran) / (executors * wall) if wall else 0.0,
        mean_gap_seconds=statistics.fmean(gaps) if gaps else 0.0,
        ramp_seconds=statistics.fmean(ramps) if ramps else 0.0,
        tail_seconds=statistics.fmean(tails) if tails else 0.0,
        mean_queue_seconds=statistics.fmean(n.queue_seconds for n in ran) if ran else 0.0,
        mean_llm_seconds=statistics.fmean(n.llm_seconds for n in nodes) if nodes else 0.0,
        overhead_ms_per_node=1000 * overhead / len(nodes) if nodes else 0.0,
        stopped_by=stopped_by, duplicates=duplicates, lost=lost,
    )


# ---- report ------------------------------------------------------------------------------


def scaling_table(results: list[ScalingResult]) -> str:
    head = (f"{'E':>3} {'ok':>4} {'wall s':>7} {'nodes/h':>8} {'ideal/h':>8} {'eff':>5} "
            f"{'exec s':>7} {'sbx ovh s':>9} {'eff(exec)':>9} {'busy':>5} {'gap s':>6} "
            f"{'ramp s':>6} {'tail s':>6} {'ovh ms/node':>11} {'other':>10}")
    lines = [head, "-" * len(head)]
    for r in results:
        other = ",".join(f"{k}:{v}" for k, v in sorted(r.other_nodes.items())) or "-"
        lines.append(
            f"{r.executors:>3} {r.ok_nodes:>4} {r.wall_seconds:>7.1f} {r.nodes_per_hour:>8.0f} "
            f"{r.ideal_per_hour:>8.0f} {r.efficiency:>5.3f} {r.mean_exec_seconds:>7.3f} "
            f"{r.sandbox_overhead_seconds:>9.3f} {r.exec_efficiency:>9.3f} "
            f"{r.busy_share:>5.3f} {r.mean_gap_seconds:>6.3f} {r.ramp_seconds:>6.3f} "
            f"{r.tail_seconds:>6.3f} {r.overhead_ms_per_node:>11.2f} {other:>10}"
        )
    return "\n".join(lines)


LEGEND = """\
eff       = nodes/h / (E*3600/node_seconds)      eff(exec) = nodes/h / (E*3600/mean exec s)
sbx ovh   = mean exec_seconds - node_seconds (bubblewrap + interpreter start, inside exec s)
busy      = sum(exec_seconds) / (E * wall)        gap = executor idle between its nodes
ramp/tail = loop start -> first exec start / last finish -> loop end (per executor, mean)
ovh ms/node = LoopStats.overhead_seconds / nodes (propose+schedule+score+store, target < 50)"""


def run_benchmark(executor_counts: list[int], *, node_seconds: float, nodes: int | None,
                  llm_delay: float, rebuild_nodes: int, policy: str,
                  layout: ClusterLayout, log: Callable[[str], None] = print) -> dict[str, Any]:
    slots = layout.exec_nodes * layout.exec_slots_per_node
    if max(executor_counts) > slots:
        raise SystemExit(f"at most {slots} executors fit the simulated cluster")
    results: list[ScalingResult] = []
    out: dict[str, Any] = {"layout": asdict(layout), "node_seconds": node_seconds,
                           "llm_delay": llm_delay, "policy": policy}
    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        root = Path(tmp)
        task = make_task(root / "data")
        started = time.perf_counter()
        with simulated_cluster(layout):
            log(f"cluster up in {time.perf_counter() - started:.1f} s: "
                f"{ray.cluster_resources().get(EXEC_RESOURCE, 0):.0f} {EXEC_RESOURCE}, "
                f"{ray.cluster_resources().get(LLM_RESOURCE, 0):.0f} {LLM_RESOURCE}")
            for e in executor_counts:
                t = time.perf_counter()
                result = measure_scaling(task, e, root / f"e{e}", node_seconds=node_seconds,
                                         nodes=nodes, llm_delay=llm_delay, policy=policy)
                results.append(result)
                log(f"E={e}: {result.ok_nodes} ok nodes in {result.wall_seconds:.1f} s "
                    f"(eff {result.efficiency:.3f}; {time.perf_counter() - t:.0f} s with "
                    "set-up)")
        rebuild = measure_rebuild(task, root, rebuild_nodes)
    spread = {name: simulate_spread(name, 100, 8) for name in ("greedy", "mcts")}
    out["scaling"] = [asdict(r) for r in results]
    out["rebuild"] = asdict(rebuild)
    out["spread"] = spread

    log("")
    log(scaling_table(results))
    log(LEGEND)
    worst = max(r.overhead_ms_per_node for r in results)
    log(f"engine overhead per node: max {worst:.2f} ms (target < {OVERHEAD_TARGET_MS:.0f} ms: "
        f"{'ok' if worst < OVERHEAD_TARGET_MS else 'OVER'})")
    log(rebuild_text(rebuild))
    log("policy spread (100 proposals, 8 in flight): "
        + ", ".join(f"{k} {v} distinct parents" for k, v in spread.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--executors", default="1,2,4,8,16",
                   help="comma-separated executor counts (default 1,2,4,8,16)")
    p.add_argument("--node-seconds", type=float, default=6.0,
                   help="seconds each candidate sleeps (default 6)")
    p.add_argument("--nodes-per-run", type=int, default=None,
                   help="nodes per executor count (default 8 waves: 8 * E)")
    p.add_argument("--llm-delay", type=float, default=0.2,
                   help="scripted LLM seconds per reply (default 0.2)")
    p.add_argument("--rebuild-nodes", type=int, default=10_000,
                   help="nodes for the journal-rebuild timing (default 10000)")
    p.add_argument("--policy", default="greedy", help="policy driving the loop (default greedy)")
    p.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = p.parse_args(argv)
    counts = [int(x) for x in args.executors.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        p.error("--executors needs positive counts, e.g. 1,2,4")
    out = run_benchmark(counts, node_seconds=args.node_seconds, nodes=args.nodes_per_run,
                        llm_delay=args.llm_delay, rebuild_nodes=args.rebuild_nodes,
                        policy=args.policy, layout=ClusterLayout())
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
