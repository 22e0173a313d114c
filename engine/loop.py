"""The steady-state search loop: keep every LLM and executor busy until a budget runs out.

The loop only schedules. Each proposal of the policy becomes a `Step` (engine/step.py) that
says what it needs next; the loop hands LLM requests to the pool of the model its operator is
routed to and code to the executor pool (actors/pool.py), awaits whichever call finishes first
(Ray ObjectRefs are awaitable), feeds the answer back to its step, and stores each finished
node: Parquet, the Journal, the policy, the live view.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from actors.pool import ActorPool, Call, short_error
from common.chat import Reply
from engine.budget import Budget
from engine.records.recorder import NodeRecorder
from engine.records.runs import kept_predictions
from engine.records.store import RunStore
from engine.search_context import ALL_FOLDS, SearchContext
from engine.sides import ExecutorSide, LlmPools, LlmSide
from engine.step import (
    DEADLINE_ERROR,
    ENGINE_WRITTEN,
    STOPPED_ERROR,
    Done,
    Execute,
    Step,
)
from operators.context import TaskContext
from sandbox import Limits
from search.families import WARM_MODULES
from search.floor import Floor
from search.node import Node
from search.policy import InFlightKey, Policy, Proposal
from search.programs import programs_over_share, programs_spent

# A floor run may take a fifth of the budget, at least this many seconds: a trial slower than
# that is not worth the executor in a short run.
FLOOR_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Execution:
    """One sandbox run a step asked for: its code on the inputs of `fold`."""

    step: Step
    fold: int
    code: str
    seconds: float
    warm: bool = False  # it may run in the executor's warm session (Execute.warm)


@dataclass
class LoopStats:
    nodes: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_seconds: float = 0.0
    repairs: int = 0
    duplicates: int = 0
    lost: int = 0
    overhead_seconds: float = 0.0  # driver time spent proposing, scheduling, scoring, storing
    stopped_by: str = ""
    llm_retired_at: float | None = None  # seconds into this start; None: the LLM served to the end
    llm_retired_why: str = ""  # search.programs.programs_spent's words
    test_scores: dict[str, float | None] = field(default_factory=dict)


class SearchLoop:
    """Drives one start of a run: the steps of `search` (the loop sets its run id, policy
    name and floor seconds) onto the `llm` and `executors` sides (engine/sides.py), each
    finished node stored by a `NodeRecorder` (engine/records/recorder.py; with
    `keep_fold_models`, the fold models of the nodes that can still become the answer).
    `requeue` holds proposals to run first (those in flight when a previous start stopped).

    A step whose LLM pool has no free slot waits for one; proposing pauses once as many wait
    as there are LLM slots in all. With no LLM slot at all (`--llm none`) the policy is never
    asked: only the floor's work runs.
    """

    def __init__(
        self,
        *,
        search: SearchContext,
        store: RunStore,
        policy: Policy,
        budget: Budget,
        llm: LlmSide,
        executors: ExecutorSide,
        requeue: list[Proposal] | None = None,
        on_node: Callable[[Node, LoopStats], None] = lambda node, stats: None,
        floor: Floor | None = None,
        keep_fold_models: bool = False,
    ) -> None:
        search.run_id, search.policy = store.run_id, policy.name
        search.floor_seconds = max(FLOOR_SECONDS, budget.seconds / 5)
        self.search, self.store, self.journal = search, store, search.journal
        self.policy = policy
        self.budget = budget
        self.on_node = on_node
        self.recorder = NodeRecorder(store, search.task, self.journal,
                                     keep_fold_models=keep_fold_models)
        self.stats = LoopStats(nodes=len(self.journal))
        self.floor = floor  # the engine's own work for idle executors; None: LLM work only
        for node, kept in kept_predictions(store, search.task, self.journal,
                                           len(search.fold_plan.held_out)):
            search.keep(node, kept)  # an earlier start's, for ensemble selection
        self._llm = LlmPools(llm)
        restart = executors.restart
        self._execs: ActorPool[Execution] = ActorPool(
            [(actor, f"executor-slot-{i}") for i, actor in enumerate(executors.actors)],
            kind="executor", restart=None if restart is None else lambda dead, slot: restart(dead))
        self._ready: deque[Execution] = deque()  # executions waiting for an executor
        self._requeue: deque[tuple[Proposal, int]] = deque((p, 0) for p in requeue or ())
        self._in_flight: dict[InFlightKey, int] = {}
        # Each fold's inputs are sent once; every executor reads these refs.
        self._inputs = {fold: ray.put(search.inputs(fold))
                        for fold in (ALL_FOLDS, *range(search.fold_plan.k))}

    @property
    def ctx(self) -> TaskContext:
        return self.search.ctx

    # ---- public ------------------------------------------------------------------------

    async def run(self) -> LoopStats:
        try:
            while self.budget.left() > 0:
                tick = time.perf_counter()
                self._dispatch()
                self.stats.overhead_seconds += time.perf_counter() - tick
                futures = self._futures()
                if not futures:
                    # Without an LLM (or with a policy that has nothing to propose) the work
                    # can run out before the budget does.
                    self.stats.stopped_by = "nothing left to run" if self._room() else \
                        "nodes or tokens"
                    break
                # No LLM pool (--llm none): nothing can hang, the budget alone bounds the wait.
                hang = self._llm.next_deadline()
                done, _ = await asyncio.wait(
                    futures, timeout=max(0.0, min(self.budget.left(), hang)),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                tick = time.perf_counter()
                self._expire_hung_generations(done)
                for future in done:
                    self._on_done(future)
                self.stats.overhead_seconds += time.perf_counter() - tick
        except asyncio.CancelledError:
            self.stats.stopped_by = "user"
            self._stop_in_flight(STOPPED_ERROR)
            raise
        if not self.stats.stopped_by:
            self.stats.stopped_by = "wall clock"
        self._stop_in_flight(DEADLINE_ERROR)
        return self.stats

    def snapshot(self) -> dict[str, int]:
        """Counts for the live view."""
        counts = {
            "generating": len(self._llm.calls()),
            "executing": len(self._execs.calls()),
            "waiting": len(self._ready),
        }
        if len(self._llm.queued) > 1:
            counts["queued for an LLM"] = self._llm.n_queued()
        return counts

    def calls(self, kind: str) -> list[tuple[Step, Any]]:
        """(step, actor) of the requests of `kind` ("llm" or "exec") in flight."""
        if kind == "llm":
            return [(c.item, c.actor) for c in self._llm.calls()]
        return [(c.item.step, c.actor) for c in self._execs.calls()]

    # ---- scheduling --------------------------------------------------------------------

    def _futures(self) -> set[asyncio.Future[Any]]:
        return self._execs.futures() | self._llm.futures()

    def _n_in_flight(self) -> int:
        return sum(self._in_flight.values())

    def _dispatch(self) -> None:
        # The loop starts engine-written steps (no LLM call) from the head of the queue.
        while self._requeue and self._requeue[0][0].operator in ENGINE_WRITTEN:
            self._start(*self._requeue.popleft())
        self._start_ready()
        self._llm.hand_queued()  # steps waiting for their model
        llm = self._llm.side
        if self._llm and (spent := programs_spent(self.journal, llm.patience)):
            self._retire_llm(spent)
        elif self._llm and not programs_over_share(self.journal, llm.program_share):
            self._generate_ahead()  # (without an LLM there is nothing to generate)
        self._engine_work()

    def _room(self) -> bool:
        """Whether the node and token budgets allow one more proposal now."""
        tokens = self.stats.prompt_tokens + self.stats.completion_tokens
        return self.budget.room(len(self.journal), self._n_in_flight(), tokens) > 0

    def _engine_work(self) -> None:
        """Executors with nothing LLM-written to run take the floor's work (portfolio, Optuna
        trials); ensemble selection, which needs no executor, whenever it is due."""
        while self.floor is not None and self._room():
            free = self._execs.has_free() and not self._ready
            proposal = self.floor.propose(self.journal, dict(self._in_flight),
                                          executor_free=free)
            if proposal is None:
                return
            self._start(proposal, 0)

    def final_ensemble(self) -> None:
        """One last ensemble selection over what the search found, if any is due."""
        if self.floor is not None and self._room():
            proposal = self.floor.propose(self.journal, dict(self._in_flight),
                                          executor_free=False)
            if proposal is not None:
                self._start(proposal, 0)

    def _generate_ahead(self) -> None:
        """Generate ahead while code waiting for its first run stays under two per executor
        (one may wait for the floor's run in progress to end): the LLM then never waits for
        the executors, and waiting code is at most one round stale."""
        while (self._llm.has_free() and self._new_code_waiting() < 2 * self._execs.size
               and self._llm.n_queued() < self._llm.slots):
            if not self._room():
                return
            if self._analysing():
                # Its findings join every later prompt: nothing else is generated before them.
                item = self._take_analysis()
                if item is None:
                    return
                proposal, attempt = item
            elif self._requeue:
                proposal, attempt = self._requeue.popleft()
            else:
                proposals = self.policy.propose(self.journal, 1, dict(self._in_flight))
                if not proposals:
                    return
                proposal, attempt = proposals[0], 0
            self._start(proposal, attempt)

    def _retire_llm(self, why: str) -> None:
        """The LLM's programs stopped paying (search.programs.programs_spent says `why`):
        it is asked nothing more, and once the LLM-written steps in flight are stored it
        goes and its CPUs become executors. LLM work re-queued is dropped."""
        if any(op not in ENGINE_WRITTEN for op, _ in self._in_flight):
            return
        self._requeue = deque(i for i in self._requeue if i[0].operator in ENGINE_WRITTEN)
        for actor in self._llm.retire():
            self._execs.add(actor, f"executor-slot-{self._execs.size}")
        self.stats.llm_retired_at, self.stats.llm_retired_why = self.budget.elapsed(), why

    def _start(self, proposal: Proposal, attempt: int) -> None:
        if self.search.stale(proposal):
            return  # re-queued from an earlier start, naming nodes that were never stored
        self._in_flight[proposal.key] = self._in_flight.get(proposal.key, 0) + 1
        step = Step(proposal, self.search, attempt=attempt)
        self.store.mark_in_flight(step.node_id, proposal)
        self._advance(step)

    def _new_code_waiting(self) -> int:
        """Scripts waiting for their first run (later folds of a script that ran are not)."""
        return sum(run.fold in (0, ALL_FOLDS) for run in self._ready)

    def _advance(self, step: Step) -> None:
        """Give the step what it needs next: a model, executors, or the store."""
        need = step.next()
        if need is None:
            return  # its other runs are still going
        if isinstance(need, Done):
            self._record(step, need)
        elif isinstance(need, Execute):
            runs = [Execution(step, fold, need.code, need.seconds, need.warm)
                    for fold in need.folds]
            if need.folds[0] in (0, ALL_FOLDS):
                self._ready.extend(runs)
            else:  # the other folds of a script that ran: first, so its node completes soon
                self._ready.extendleft(reversed(runs))
            self._start_ready()  # else it could wait while nothing else is in flight
        else:
            self._llm.ask(step, need)

    def _start_ready(self) -> None:
        while self._ready and self._execs.has_free():
            run = self._ready.popleft()
            if run.step.over:
                continue  # its node was stored already (lost with another run)
            # The sandbox's own clock stops candidates at the deadline, so none outlives the run.
            limit = max(1.0, min(run.seconds, self.budget.left()))
            run.step.on_started(run.fold, limit)
            self._execs.submit(run, "run", run.code, self._inputs[run.fold],
                               Limits(wall_seconds=limit), WARM_MODULES if run.warm else ())

    def _analysing(self) -> bool:
        """Whether an analysis step is queued or in flight."""
        return (any(op.traits.informs for op, _ in self._in_flight)
                or any(p.operator.traits.informs for p, _ in self._requeue))

    def _take_analysis(self) -> tuple[Proposal, int] | None:
        for item in self._requeue:
            if item[0].operator.traits.informs:
                self._requeue.remove(item)
                return item
        return None

    # ---- results -----------------------------------------------------------------------

    def _on_done(self, future: asyncio.Future[Any]) -> None:
        if self._execs.owns(future):
            self._on_executed(self._execs.finish(future), future)
            return
        pool = self._llm.owner(future)
        call = pool.finish(future)
        step = call.item
        try:
            reply: Reply = future.result()[0]
        except Exception as exc:  # a failed LLM call costs this node only
            self._lose(step, f"LLM call failed: {short_error(exc)}")  # stored before any raise
            if isinstance(exc, ray.exceptions.RayActorError):
                pool.replace(call)
            return
        pool.healthy(call.slot)  # it answered: the actor is healthy
        self.stats.prompt_tokens += reply.prompt_tokens
        self.stats.completion_tokens += reply.completion_tokens
        self.stats.llm_seconds += reply.seconds
        step.on_reply(reply)
        self._advance(step)  # a further request takes the slot freed just now

    def _on_executed(self, call: Call[Execution], future: asyncio.Future[Any]) -> None:
        step = call.item.step
        try:
            outcome = future.result()
        except Exception as exc:  # a dead executor costs this node only
            if isinstance(exc, ray.exceptions.RayActorError):
                self._execs.replace(call)
            if not step.over:
                self._lose(step, f"executor failed: {short_error(exc)}")
            return
        if step.over:
            return  # a late run of a node already stored
        step.on_result(call.item.fold, outcome.result, executor=outcome.executor,
                       node_ip=outcome.node_ip)
        self._advance(step)

    def _expire_hung_generations(self, done: set[asyncio.Future[Any]]) -> None:
        """A generation past llm_timeout is lost and its actor replaced: a synchronous actor
        cannot cancel a running call, so killing it is the only way to get the slot back."""
        for pool in self._llm.pools.values():
            for call in pool.expire(done):
                self._lose(call.item, f"LLM call timed out after {self._llm.side.timeout:g}s; "
                                      "actor replaced")
                pool.replace(call)

    def _lose(self, step: Step, error: str) -> None:
        """Record a node lost to infrastructure and re-propose it once."""
        self.stats.lost += 1
        self._record(step, step.lose(error))
        if step.attempt < 1:
            self._requeue.append((step.proposal, step.attempt + 1))

    def _record(self, step: Step, done: Done) -> None:
        """Store a finished node (its predictions, row, Journal entry: NodeRecorder), then
        show it to the policy and the live view."""
        node, predictions = done.node, done.predictions
        key = step.proposal.key
        self._in_flight[key] -= 1
        if not self._in_flight[key]:
            del self._in_flight[key]
        self.stats.repairs += step.repaired
        self.stats.duplicates += step.duplicate
        if predictions is not None:
            self.search.keep(node, predictions)
        # Work stopped by a deadline or Ctrl-C stays marked in flight: a resume re-proposes it.
        self.recorder.record(node, done.test_raw, predictions, done.fold_models,
                             stopped=node.error in (DEADLINE_ERROR, STOPPED_ERROR))
        if node.operator.traits.informs:
            retry = self.search.after_analysis(node)
            if retry is not None:
                self._requeue.appendleft((retry, 0))
        self.policy.observe(node)
        self.stats.nodes = len(self.journal)
        self.stats.test_scores[node.node_id] = done.test_raw
        self.on_node(node, self.stats)

    def _stop_in_flight(self, reason: str) -> None:
        """Record everything still running or waiting as killed, then drop it. In a start
        without an LLM (--llm none), the LLM's proposals re-queued from an earlier start could
        not start: they are marked in flight again, so a later start with one proposes them."""
        while self._requeue and not self._llm.slots:
            self.store.mark_in_flight(secrets.token_hex(6), self._requeue.popleft()[0])
        steps = [run.step for run in [*self._execs.cancel_all(), *self._ready]]
        steps += self._llm.cancel_all()
        self._ready.clear()
        for step in dict.fromkeys(steps):  # a step with several runs in flight: killed once
            if not step.over:
                self._record(step, step.kill(reason))
