"""The steady-state search loop: keep every LLM and executor busy until a budget runs out.

The loop only schedules. Each proposal of the policy becomes a `Step` (engine/step.py) that
says what it needs next; the loop hands LLM requests to the pool of the model its operator is
routed to and code to the executor pool (actors/pool.py), awaits whichever call finishes first
(Ray ObjectRefs are awaitable), feeds the answer back to its step, and stores each finished
node: Parquet, the Journal, the policy, the live view.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from actors.pool import ActorPool, Call, short_error
from common.chat import Reply
from common.errors import BackendError, StoreError
from engine.budget import Budget
from engine.deploy.saved_model import answer_candidates
from engine.evaluation.folds import Folds
from engine.evaluation.scoring import frame_csv
from engine.records.runs import kept_predictions
from engine.records.store import RunStore
from engine.search_context import ALL_FOLDS, SearchContext
from engine.step import (
    DEADLINE_ERROR,
    ENGINE_WRITTEN,
    STOPPED_ERROR,
    Done,
    Execute,
    Generate,
    Step,
)
from engine.task.prepare import PreparedTask
from operators.context import TaskContext
from sandbox import Limits
from search.floor import Floor
from search.journal import Journal
from search.node import Node, Operator
from search.policy import InFlightKey, Policy, Proposal
from search.programs import programs_over_share, programs_spent

# A floor run may take a fifth of the budget, at least this many seconds: a trial slower than
# that is not worth the executor in a short run.
FLOOR_SECONDS = 60.0
# An LLM actor that dies (or hangs past llm_timeout) is replaced; this many replacements in a
# row without one good reply from that actor means the backend itself is broken: stop loudly
# instead of losing every node of the run.
MAX_LLM_RESTARTS = 3


@dataclass(frozen=True, slots=True)
class Execution:
    """One sandbox run a step asked for: its code on the inputs of `fold`."""

    step: Step
    fold: int
    code: str
    seconds: float


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
    """Drives one start of a run. `llm_slots` lists (actor, name) once per concurrent request
    an actor accepts; `requeue` holds proposals to run first (those in flight when a previous
    start stopped).

    Mixed models: `llm_pools` maps an actor name to its pool (its spec) and `route` an
    operator to the pool that serves it. A step whose pool has no free slot waits for one
    (`queued`); proposing pauses once as many wait as there are LLM slots in all. With no LLM
    slot at all (`--llm none`) the policy is never asked: only the floor's work runs.
    """

    def __init__(
        self,
        *,
        task: PreparedTask,
        ctx: TaskContext,
        store: RunStore,
        journal: Journal,
        policy: Policy,
        llm_slots: list[tuple[Any, str]],
        executors: list[Any],
        budget: Budget,
        exec_timeout: float,
        requeue: list[Proposal] | None = None,
        restart_executor: Callable[[Any], Any] | None = None,
        restart_llm: Callable[[Any, str], Any] | None = None,
        llm_timeout: float = 600.0,
        reflect: bool = False,
        on_node: Callable[[Node, LoopStats], None] = lambda node, stats: None,
        llm_pools: dict[str, str] | None = None,
        route: Callable[[Operator], str] | None = None,
        folds: Folds | None = None,
        floor: Floor | None = None,
        keep_fold_models: bool = False,
        llm_patience: int = 0,
        program_share: float = 1.0,
        lend_llm: Callable[[], list[Any]] | None = None,
    ) -> None:
        self.store = store
        # Keep the fold models scoring fitted for the nodes that can still become the answer
        # (engine/deploy/saved_model.py), so saving it fits nothing again.
        self.keep_fold_models = keep_fold_models
        self.journal = journal
        self.policy = policy
        self.budget = budget
        self.on_node = on_node
        self.llm_timeout = llm_timeout
        self.search = SearchContext(task, ctx, journal, store.run_id, policy.name,
                                    exec_timeout, max(FLOOR_SECONDS, budget.seconds / 5),
                                    reflect, folds=folds)
        self.stats = LoopStats(nodes=len(journal))
        self.floor = floor  # the engine's own work for idle executors; None: LLM work only
        for node, kept in kept_predictions(store, self.search.task, journal,
                                           len(self.search.fold_plan.held_out)):
            self.search.keep(node, kept)  # an earlier start's, for ensemble selection
        pool_of = {name: (llm_pools or {}).get(name, "") for _, name in llm_slots}
        self._llms: dict[str, ActorPool[Step]] = {
            pool: ActorPool([s for s in llm_slots if pool_of[s[1]] == pool], kind="LLM",
                            restart=restart_llm, max_restarts=MAX_LLM_RESTARTS,
                            hang_seconds=llm_timeout)
            for pool in dict.fromkeys(pool_of.values())
        }
        if route is None:
            if len(self._llms) > 1:
                raise ValueError("several LLM pools need a route: operator -> pool")
            only = next(iter(self._llms), "")
            route = lambda operator: only  # noqa: E731 (one pool serves every operator)
        self._route = route
        self._patience, self._lend_llm = llm_patience, lend_llm  # see _retire_llm
        # the share of the executors' seconds feature programs may take (search.programs)
        self._program_share = program_share
        self._n_llm_slots = len(llm_slots)
        restart = None if restart_executor is None else (lambda dead, slot: restart_executor(dead))
        self._execs: ActorPool[Execution] = ActorPool(
            [(actor, f"executor-slot-{i}") for i, actor in enumerate(executors)],
            kind="executor", restart=restart)
        # Requests waiting for a slot of their model.
        self._queued: dict[str, deque[tuple[Step, Generate]]] = {p: deque() for p in self._llms}
        self._ready: deque[Execution] = deque()  # executions waiting for an executor
        self._requeue: deque[tuple[Proposal, int]] = deque((p, 0) for p in requeue or ())
        self._in_flight: dict[InFlightKey, int] = {}
        # Each fold's inputs are sent once; every executor reads these refs.
        plan = self.search.fold_plan
        self._inputs = {fold: ray.put(self.search.inputs(fold))
                        for fold in (ALL_FOLDS, *range(plan.k))}

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
                hang = min((pool.next_deadline() for pool in self._llms.values()),
                           default=math.inf)
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
            "generating": sum(len(pool.calls()) for pool in self._llms.values()),
            "executing": len(self._execs.calls()),
            "waiting": len(self._ready),
        }
        if len(self._queued) > 1:
            counts["queued for an LLM"] = self._n_queued()
        return counts

    def calls(self, kind: str) -> list[tuple[Step, Any]]:
        """(step, actor) of the requests of `kind` ("llm" or "exec") in flight."""
        if kind == "llm":
            return [(c.item, c.actor) for pool in self._llms.values() for c in pool.calls()]
        return [(c.item.step, c.actor) for c in self._execs.calls()]

    # ---- scheduling --------------------------------------------------------------------

    def _futures(self) -> set[asyncio.Future[Any]]:
        return set().union(self._execs.futures(), *(p.futures() for p in self._llms.values()))

    def _n_in_flight(self) -> int:
        return sum(self._in_flight.values())

    def _n_queued(self) -> int:
        return sum(len(q) for q in self._queued.values())

    def _free_llm(self) -> bool:
        return any(pool.has_free() for pool in self._llms.values())

    def _dispatch(self) -> None:
        # The loop starts engine-written steps (no LLM call) from the head of the queue.
        while self._requeue and self._requeue[0][0].operator in ENGINE_WRITTEN:
            self._start(*self._requeue.popleft())
        self._start_ready()
        for pool, queued in self._queued.items():  # steps waiting for their model
            while queued and self._llms[pool].has_free():
                self._generate(*queued.popleft(), pool)
        if self._llms and (spent := programs_spent(self.journal, self._patience)):
            self._retire_llm(spent)
        elif self._llms and not programs_over_share(self.journal, self._program_share):
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
        while (self._free_llm() and self._new_code_waiting() < 2 * self._execs.size
               and self._n_queued() < self._n_llm_slots):
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
        goes and `lend_llm` gives its CPUs to executors. LLM work re-queued is dropped."""
        if any(op not in ENGINE_WRITTEN for op, _ in self._in_flight):
            return
        self._requeue = deque(i for i in self._requeue if i[0].operator in ENGINE_WRITTEN)
        for actor in self._lend_llm() if self._lend_llm is not None else []:
            self._execs.add(actor, f"executor-slot-{self._execs.size}")
        self._llms, self._queued, self._n_llm_slots = {}, {}, 0
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
            runs = [Execution(step, fold, need.code, need.seconds) for fold in need.folds]
            if need.folds[0] in (0, ALL_FOLDS):
                self._ready.extend(runs)
            else:  # the other folds of a script that ran: first, so its node completes soon
                self._ready.extendleft(reversed(runs))
            self._start_ready()  # else it could wait while nothing else is in flight
        else:
            pool = self._route(step.operator)
            if pool not in self._llms:
                raise BackendError(f"no LLM actors serve {step.operator.value!r} "
                                   f"(pool {pool!r})")
            if self._llms[pool].has_free():
                self._generate(step, need, pool)
            else:
                self._queued[pool].append((step, need))

    def _start_ready(self) -> None:
        while self._ready and self._execs.has_free():
            run = self._ready.popleft()
            if run.step.over:
                continue  # its node was stored already (lost with another run)
            # The sandbox's own clock stops candidates at the deadline, so none outlives the run.
            limit = max(1.0, min(run.seconds, self.budget.left()))
            run.step.on_started(run.fold, limit)
            self._execs.submit(run, "run", run.code, self._inputs[run.fold],
                               Limits(wall_seconds=limit))

    def _generate(self, step: Step, need: Generate, pool: str) -> None:
        call = self._llms[pool].submit(step, "generate", [need.prompt])
        step.generating(call.slot)

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
        pool = next(p for p in self._llms.values() if p.owns(future))
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
        for pool in self._llms.values():
            for call in pool.expire(done):
                self._lose(call.item, f"LLM call timed out after {self.llm_timeout:g}s; "
                                      "actor replaced")
                pool.replace(call)

    def _lose(self, step: Step, error: str) -> None:
        """Record a node lost to infrastructure and re-propose it once."""
        self.stats.lost += 1
        self._record(step, step.lose(error))
        if step.attempt < 1:
            self._requeue.append((step.proposal, step.attempt + 1))

    def _record(self, step: Step, done: Done) -> None:
        """Store a finished node, then show it to the Journal, the policy and the live view."""
        node, predictions = done.node, done.predictions
        key = step.proposal.key
        self._in_flight[key] -= 1
        if not self._in_flight[key]:
            del self._in_flight[key]
        self.stats.repairs += step.repaired
        self.stats.duplicates += step.duplicate
        previous_best = self.journal.best()
        try:
            if predictions is not None:
                self.search.keep(node, predictions)
                # Before the node's row: a stored scored node always has its predictions.
                valid_csv = frame_csv(self.search.task, predictions.valid)
                test_csv = frame_csv(self.search.task, predictions.test)
                self.store.write_predictions(node.node_id, valid_csv, test_csv)
            self.store.append(node, done.test_raw)
        except OSError as exc:
            # A full or failing disk: stop now rather than run nodes that cannot be kept. Every
            # part written so far is whole (write, fsync, rename), and this node's in-flight
            # note stays, so a resume re-proposes it.
            raise StoreError(f"cannot store node {node.node_id} in {self.store.nodes_dir}: "
                             f"{short_error(exc)}; free disk space, then --resume "
                             f"{self.store.root}") from exc
        self.journal.add(node)
        if self.keep_fold_models and node.metric is not None:
            self._keep_fold_models(node, done.fold_models)
        if node.operator.traits.informs:
            retry = self.search.after_analysis(node)
            if retry is not None:
                self._requeue.appendleft((retry, 0))
        if node.error not in (DEADLINE_ERROR, STOPPED_ERROR):
            # Work stopped by a deadline or Ctrl-C stays marked, so a resume re-proposes it.
            self.store.clear_in_flight(node.node_id)
        if self.journal.best() is not previous_best and predictions is not None:
            self.store.write_best(node, valid_csv, test_csv)
        self.policy.observe(node)
        self.stats.nodes = len(self.journal)
        self.stats.test_scores[node.node_id] = done.test_raw
        self.on_node(node, self.stats)

    def _keep_fold_models(self, node: Node, fold_models: list[bytes] | None) -> None:
        """Keep a scored node's fold models while it can become the answer or a member of
        it, and drop those of nodes that no longer can. A disk that refuses them costs only
        the time to fit the answer again at the end."""
        keepers = answer_candidates(self.journal)
        try:
            if fold_models is not None and node.node_id in keepers:
                self.store.keep_fold_models(node.node_id, fold_models)
            self.store.drop_fold_models(keepers)
        except OSError:
            pass

    def _stop_in_flight(self, reason: str) -> None:
        """Record everything still running or waiting as killed, then drop it. In a start
        without an LLM (--llm none), the LLM's proposals re-queued from an earlier start could
        not start: they are marked in flight again, so a later start with one proposes them."""
        while self._requeue and not self._n_llm_slots:
            self.store.mark_in_flight(secrets.token_hex(6), self._requeue.popleft()[0])
        steps = [run.step for run in [*self._execs.cancel_all(), *self._ready]]
        for pool in self._llms.values():
            steps += pool.cancel_all()
        steps += [step for q in self._queued.values() for step, _ in q]
        self._ready.clear()
        for queued in self._queued.values():
            queued.clear()
        for step in dict.fromkeys(steps):  # a step with several runs in flight: killed once
            if not step.over:
                self._record(step, step.kill(reason))
