"""Shared pieces of the reliability tests: candidate scripts, process probes, and a SearchLoop
built by hand (as engine.search_run.SearchRun.start builds it) so a test can inject faults into
a live run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from actors.workers import ExecutorActor, start_executors, start_llm_actors
from engine.budget import Budget
from engine.loop import LoopStats, SearchLoop
from engine.records.store import RunStore
from engine.search_context import SearchContext
from engine.search_run import task_context
from engine.sides import ExecutorSide, LlmSide
from engine.task.prepare import PreparedTask
from sandbox import Limits
from search.journal import Journal
from search.policy import make_policy


def sandbox_uid_processes() -> list[int]:
    """Live processes of the sandbox's private uids (2**30 and up) started by this suite: none
    may outlive a run."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            zombie = "\nState:\tZ" in status
            if (line.startswith("Uid:") and int(line.split()[1]) >= 2**30 and not zombie
                    and _ours(entry)):
                found.append(int(entry))
    return found


def _ours(pid: str) -> bool:
    """Whether a sandboxed process belongs to this suite: its HOME (the sandbox workdir) lies
    under this suite's temp folder. One whose HOME cannot be read counts as ours."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return True
    homes = [e[5:].decode(errors="replace") for e in environ if e.startswith(b"HOME=")]
    return not homes or homes[0].startswith(tempfile.gettempdir())


def sandbox_workdirs() -> list[str]:
    return sorted(p.name for p in Path(tempfile.gettempdir()).glob("sbx-*"))


def script(tag: str, seconds: float = 0.0, prelude: str = "", value: float = 0.5) -> str:
    """A whole-script reply (stdlib only) that runs `prelude`, sleeps, writes a constant."""
    code = (
        "import csv, os, subprocess, sys, time\n"
        f"# reply {tag}\n"
        f"{prelude}\n"
        f"time.sleep({seconds!r})\n"
        "for name in ('valid', 'test'):\n"
        "    with open(f'input/{name}.csv', newline='') as handle:\n"
        "        rows = sum(1 for _ in csv.reader(handle)) - 1\n"
        "    with open(f'submission/{name}.csv', 'w', newline='') as handle:\n"
        f"        handle.write('prediction\\n' + '{value}\\n' * rows)\n"
    )
    return f"Reply {tag}.\n```python\n{code}```\n"


def replies(prefix: str, count: int, seconds: float = 0.0) -> list[str]:
    return [script(f"{prefix}-{i}", seconds, value=0.5 + i / 1000) for i in range(count)]


def write_replies(path: Path, draft: list[str], *, delay: float = 0.0,
                  others: list[str] | None = None) -> str:
    others = others if others is not None else draft
    data: dict[str, Any] = {"draft": draft, "improve": others, "debug": others, "delay": delay}
    path.write_text(json.dumps(data))
    return f"scripted:{path}"


@dataclass
class Rig:
    loop: SearchLoop
    store: RunStore
    journal: Journal
    llm_specs: list[str]  # the first actor's spec, then one per restart
    llm_restarts: list[str] = field(default_factory=list)
    exec_restarts: int = 0

    async def run(self, injector: Callable[[SearchLoop], Awaitable[None]] | None = None
                  ) -> LoopStats:
        """The loop, with `injector` acting on it from the same event loop."""
        side = asyncio.ensure_future(injector(self.loop)) if injector else None
        try:
            return await self.loop.run()
        finally:
            if side is not None:
                side.cancel()


def build_rig(tmp: Path, task: PreparedTask, llm_specs: list[str], *, executors: int = 2,
              max_nodes: int = 6, seconds: float = 120.0, exec_timeout: float = 60.0,
              llm_timeout: float = 600.0, concurrency: int = 1,
              exec_resources: dict[str, float] | None = None,
              llm_resources: dict[str, float] | None = None,
              spread: bool = False) -> Rig:
    """A SearchLoop on the connected Ray, wired like SearchRun.start. A replaced LLM actor
    gets the next spec of `llm_specs` (the last one repeats), so a test can make the restarted
    backend healthy or keep it broken."""
    store = RunStore.create(tmp / "runs", task, {"starts": [], "spent": {}})
    journal = Journal()
    llms = start_llm_actors(llm_specs[0], 1, {}, concurrency=concurrency, num_cpus=0,
                            resources=llm_resources)
    options: dict[str, Any] = {"num_cpus": 0, "resources": exec_resources or {}}
    if spread:
        options["scheduling_strategy"] = "SPREAD"
    execs = [ExecutorActor.options(max_concurrency=1, **options).remote(f"exec-{i}")
             for i in range(executors)] if (exec_resources or spread) else \
        start_executors(executors, num_cpus=0)
    # Warm-up: actor processes up, the sandbox's one-time isolation probe done.
    ray.get([llms[0].model.remote()]
            + [e.run.remote("import sys\n", {}, Limits(wall_seconds=60.0)) for e in execs],
            timeout=300)
    rig: Rig

    def restart_exec(dead: Any) -> Any:
        rig.exec_restarts += 1
        return ExecutorActor.options(max_concurrency=1, **options).remote(
            f"exec-r{secrets.token_hex(2)}")

    def restart_llm(dead: Any, name: str) -> Any:
        spec = llm_specs[min(len(rig.llm_restarts) + 1, len(llm_specs) - 1)]
        rig.llm_restarts.append(spec)
        with contextlib.suppress(Exception):
            ray.kill(dead, no_restart=True)
        return start_llm_actors(spec, 1, {}, concurrency=concurrency, num_cpus=0,
                                resources=llm_resources)[0]

    loop = SearchLoop(
        search=SearchContext(task, task_context(task, 0), journal, exec_timeout=exec_timeout),
        store=store, policy=make_policy("greedy", seed=0, num_drafts=max_nodes),
        budget=Budget(seconds, max_nodes=max_nodes),
        llm=LlmSide([(llms[0], "llm-0")] * concurrency, timeout=llm_timeout,
                    restart=restart_llm),
        executors=ExecutorSide(execs, restart_exec),
    )
    rig = Rig(loop, store, journal, llm_specs)
    return rig


def pending(loop: SearchLoop, kind: str) -> list[tuple[Any, Any]]:
    """(job, worker) of the requests of `kind` ("llm" or "exec") in flight."""
    return loop.calls(kind)


def check_stored_once(rig: Rig) -> None:
    """Every node of the Journal is in the store exactly once and nothing is left in flight."""
    nodes, _ = RunStore.open(rig.store.root).read_nodes()
    ids = [n.node_id for n in nodes]
    assert len(ids) == len(set(ids)), "a node was stored twice"
    assert set(ids) == {n.node_id for n in rig.journal}, "store and Journal disagree"
    assert not list((rig.store.root / "inflight").glob("*.json")), "in-flight notes left"
