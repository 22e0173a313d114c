"""Worker and infrastructure faults injected into a live SearchLoop on real Ray, with the real
sandbox and the scripted LLM: a dead executor, a dead, failing or hanging LLM backend. Each
run finishes, every finished node is stored exactly once, and what was in flight when the
fault hit is recorded `lost` and proposed again."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import ray

from benchmarks.scaling import make_task
from common.errors import BackendError
from engine.loop import SearchLoop
from engine.sides import MAX_LLM_RESTARTS
from engine.task.prepare import PreparedTask
from search.node import Operator, Status
from tests.helpers import processes_with
from tests.reliability._rig import (
    build_rig,
    check_stored_once,
    pending,
    replies,
    script,
    write_replies,
)

# Faults are injected at moments of a live run (mid-generation, mid-execution): other work on
# the cores moves those moments.
pytestmark = pytest.mark.timing


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    return make_task(tmp_path_factory.mktemp("faults-data"), rows=60)


def _lost(rig_journal: object) -> list[object]:
    return [n for n in rig_journal if n.status is Status.LOST]  # type: ignore[attr-defined]


def test_executor_killed_mid_node(ray_local: None, task: PreparedTask, tmp_path: Path) -> None:
    marker = f"relmark{uuid.uuid4().hex}"
    # The first draft starts a marked child and runs long: it is the node whose executor dies.
    victim = script("victim", 60.0, prelude=(
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)  # {marker}'])"))
    spec = write_replies(tmp_path / "r.json", [victim, *replies("d", 10, 0.5)])
    rig = build_rig(tmp_path, task, [spec], executors=2, max_nodes=5)

    async def kill_victim(loop: SearchLoop) -> None:
        while True:
            for job, executor in pending(loop, "exec"):
                if marker in job.code and processes_with(marker):
                    ray.kill(executor)
                    return
            await asyncio.sleep(0.05)

    stats = asyncio.run(rig.run(kill_victim))
    assert stats.stopped_by == "nodes or tokens"
    (lost,) = _lost(rig.journal)
    assert lost.error.startswith("executor failed"), lost.error  # type: ignore[attr-defined]
    assert stats.lost == 1 and rig.exec_restarts == 1
    ok = [n for n in rig.journal if n.status is Status.OK]
    assert len(ok) == 4, [(n.status, n.error) for n in rig.journal]
    # The lost draft was proposed again (as the requeue) and ran on a replacement executor.
    assert any(n.executor.startswith("exec-r") for n in ok)
    check_stored_once(rig)
    # bubblewrap's --die-with-parent took the candidate's whole tree with the actor.
    for _ in range(50):
        if not processes_with(marker):
            break
        asyncio.run(asyncio.sleep(0.1))
    assert processes_with(marker) == []


def test_llm_actor_killed_mid_generation(ray_local: None, task: PreparedTask,
                                         tmp_path: Path) -> None:
    first = write_replies(tmp_path / "a.json", replies("a", 10), delay=1.0)
    # The replacement replays its own file from the start: distinct code, so no duplicates.
    second = write_replies(tmp_path / "b.json", replies("b", 10), delay=0.2)
    rig = build_rig(tmp_path, task, [first, second], executors=2, max_nodes=5)
    killed: list[object] = []

    async def kill_llm(loop: SearchLoop) -> None:
        while not killed:
            for job, actor in pending(loop, "llm"):
                if len(loop.journal) >= 1:
                    await asyncio.sleep(0.3)  # mid-generation (each one takes 1 s)
                    ray.kill(actor)
                    killed.append(job.node_id)
                    return
            await asyncio.sleep(0.05)

    stats = asyncio.run(rig.run(kill_llm))
    assert stats.stopped_by == "nodes or tokens"
    (lost,) = _lost(rig.journal)
    assert lost.node_id == killed[0]  # type: ignore[attr-defined]
    assert lost.error.startswith("LLM call failed")  # type: ignore[attr-defined]
    assert rig.llm_restarts == [second]
    assert sum(n.status is Status.OK for n in rig.journal) == 4
    assert any("Reply b-" in n.plan for n in rig.journal)  # served by the new actor
    check_stored_once(rig)


def test_llm_backend_errors_cost_only_their_nodes(ray_local: None, task: PreparedTask,
                                                  tmp_path: Path) -> None:
    draft = ["__raise__", replies("c", 1)[0], "__raise__", *replies("e", 10)]
    spec = write_replies(tmp_path / "r.json", draft)
    rig = build_rig(tmp_path, task, [spec], executors=1, max_nodes=6)
    stats = asyncio.run(rig.run())
    lost = _lost(rig.journal)
    assert len(lost) == 2 and stats.lost == 2
    assert all("scripted backend error" in n.error for n in lost)  # type: ignore[attr-defined]
    assert rig.llm_restarts == []  # the actor is alive: an error is not a death
    assert sum(n.status is Status.OK for n in rig.journal) == 4
    assert stats.stopped_by == "nodes or tokens"
    check_stored_once(rig)


def test_hung_llm_call_times_out_and_actor_restarts(ray_local: None, task: PreparedTask,
                                                    tmp_path: Path) -> None:
    hanging = write_replies(tmp_path / "h.json", ["__hang__", *replies("h", 5)])
    healthy = write_replies(tmp_path / "g.json", replies("g", 10))
    # 5 s, not less: a call's deadline starts when it is sent, so a restarted actor's first
    # call includes the actor's start, which took over 2 s beside a loaded machine's installs.
    rig = build_rig(tmp_path, task, [hanging, healthy], executors=1, max_nodes=4,
                    llm_timeout=5.0)
    stats = asyncio.run(rig.run())
    (lost,) = _lost(rig.journal)
    assert "timed out after 5s" in lost.error  # type: ignore[attr-defined]
    assert lost.operator is Operator.DRAFT  # type: ignore[attr-defined]
    assert rig.llm_restarts == [healthy]
    assert sum(n.status is Status.OK for n in rig.journal) == 3
    assert stats.stopped_by == "nodes or tokens"
    check_stored_once(rig)


def test_llm_that_keeps_hanging_stops_the_run_clearly(ray_local: None, task: PreparedTask,
                                                      tmp_path: Path) -> None:
    hanging = write_replies(tmp_path / "h.json", ["__hang__"])
    rig = build_rig(tmp_path, task, [hanging], executors=1, max_nodes=20, llm_timeout=1.0)
    with pytest.raises(BackendError, match="died or hung 4 times in a row"):
        asyncio.run(rig.run())
    assert len(rig.llm_restarts) == MAX_LLM_RESTARTS
    nodes, _ = rig.store.read_nodes()  # what finished (all lost) is stored and readable
    assert len(nodes) == MAX_LLM_RESTARTS + 1
    assert all(n.status is Status.LOST for n in nodes)
