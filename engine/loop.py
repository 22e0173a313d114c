"""The steady-state search loop: keep every LLM and executor busy until a budget runs out.

Ray ObjectRefs are awaitable, so the loop awaits whichever generation or execution finishes
first. A finished generation becomes code for the next free executor; a finished execution is
scored here, in the driver, against labels that never leave this process, then appended to
the Journal and the Store and shown to the policy, which is asked for more proposals.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import ray

from engine.scoring import SubmissionError, score, score_train
from engine.store import RunStore
from engine.task import PreparedTask
from operators.analyst import (
    analysis_findings,
    next_analysis,
    parse_analysis,
    silent_analysis_error,
)
from operators.context import TaskContext
from operators.flags import implementation_flags
from operators.harness import assemble, baseline_code, ensemble_code, ensemble_vote
from operators.measure import Measurements, split_measurements
from operators.prompts import (
    INSIGHTS_ASK,
    build_prompt,
    improve_change,
    reflect_prompt,
    repair_prompt,
)
from operators.replies import clean_reflection, parse_insights, parse_reply, self_reported_metric
from sandbox import ExecResult, Limits
from search.chat import ChatPrompt, Reply
from search.ensemble import plan as ensemble_plan
from search.errors import BackendError, StoreError
from search.journal import Journal
from search.node import Node, Operator, Status, code_hash
from search.policy import InFlightKey, Policy, Proposal
from search.sela import encode_insights

DEADLINE_ERROR = "stopped at the budget deadline"
ENGINE_WRITTEN = (Operator.BASELINE, Operator.ENSEMBLE)
STOPPED_ERROR = "stopped by the user"
# An LLM actor that dies (or hangs past llm_timeout) is replaced; this many replacements in a
# row without one good reply from that actor means the backend itself is broken: stop loudly
# instead of losing every node of the run.
MAX_LLM_RESTARTS = 3
# The analysis is a preamble every draft waits for, not a candidate: a slow one costs the
# whole search, so it gets less time than a candidate.
ANALYSIS_SECONDS = 120.0


@dataclass
class Job:
    """One expansion on its way through generation and execution."""

    proposal: Proposal
    node_id: str
    parent: Node | None
    created_at: float
    prompt: ChatPrompt | None = None
    llm_actor: str = ""
    model: str = ""
    plan: str = ""
    code: str = ""
    llm_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    repaired: bool = False
    queued_at: float = 0.0
    started_at: float = 0.0
    exec_limit: float = 0.0
    attempt: int = 0  # how often this proposal was lost to a dead worker and re-proposed
    llm_deadline: float = 0.0  # time.monotonic() after which its generation counts as hung
    llm_handle: Any = None  # the actor serving its generation (to tell a dead one apart)
    reflected: bool = False  # --reflect: the reflection call is done (its text may be "")
    reflection: str = ""
    reply: str = ""  # raw text of the reply that gave the code
    pool: str = ""  # the LLM pool (spec) its operator is routed to


@dataclass
class Budget:
    """Wall clock, node count and token count: whichever runs out first ends the run.

    The wall clock is a hard stop (work in flight is killed and recorded); spent nodes or
    tokens only stop new proposals, and the work already paid for finishes.
    """

    seconds: float
    max_nodes: int | None = None
    max_tokens: int | None = None
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def room(self, done: int, in_flight: int, tokens: int) -> int:
        """How many more proposals may start now."""
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return 0
        if self.max_nodes is None:
            return 1 << 30
        return self.max_nodes - done - in_flight


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
    test_scores: dict[str, float | None] = field(default_factory=dict)


class SearchLoop:
    """Drives one start of a run. `llm_slots` lists (actor, name) once per concurrent request
    an actor accepts; `requeue` holds proposals to run first (those in flight when a previous
    start stopped).

    Mixed models: `llm_pools` maps an actor name to its pool (its spec) and `route` an
    operator to the pool that serves it. A proposal whose pool has no free slot waits for
    one (`queued`); proposing pauses once as many wait as there are LLM slots in all.
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
    ) -> None:
        self.task = task
        self.ctx = ctx
        self.store = store
        self.journal = journal
        self.policy = policy
        self.budget = budget
        self.exec_timeout = exec_timeout
        self.on_node = on_node
        self.restart_executor = restart_executor
        self.restart_llm = restart_llm
        self.llm_timeout = llm_timeout
        self.reflect = reflect  # a reflection call before every debug and improve step
        self.stats = LoopStats(nodes=len(journal))
        # Slots are served by whichever actor currently holds the name: a replaced actor takes
        # over every slot of the dead one, including requests queued for it.
        self._llm_actors: dict[str, Any] = {name: actor for actor, name in llm_slots}
        self._llm_restarts: dict[str, int] = {}  # replacements in a row, per actor name
        self._pool_of = {name: (llm_pools or {}).get(name, "") for _, name in llm_slots}
        self._free_llms: dict[str, deque[tuple[Any, str]]] = {}
        for slot in llm_slots:
            self._free_llms.setdefault(self._pool_of[slot[1]], deque()).append(slot)
        if route is None:
            if len(self._free_llms) > 1:
                raise ValueError("several LLM pools need a route: operator -> pool")
            only = next(iter(self._free_llms), "")
            route = lambda operator: only  # noqa: E731 (one pool serves every operator)
        self._route = route
        self._n_llm_slots = len(llm_slots)
        self._queued: dict[str, deque[Job]] = {pool: deque() for pool in self._free_llms}
        self._free_execs = deque(executors)
        self._n_executors = len(executors)
        self._requeue: deque[tuple[Proposal, int]] = deque((p, 0) for p in requeue or ())
        self._ready: deque[Job] = deque()  # code waiting for an executor
        self._pending: dict[asyncio.Future[Any], tuple[str, Job, Any]] = {}
        self._in_flight: dict[InFlightKey, int] = {}
        self._running_code: dict[str, str] = {}  # code hash -> node id, queued or executing
        self._requests = 0
        self._inputs_ref = ray.put(task.inputs())  # sent once; every executor reads this ref

    # ---- public ------------------------------------------------------------------------

    async def run(self) -> LoopStats:
        try:
            while self.budget.left() > 0:
                tick = time.perf_counter()
                self._dispatch()
                self.stats.overhead_seconds += time.perf_counter() - tick
                if not self._pending:
                    self.stats.stopped_by = "nodes or tokens"
                    break
                done, _ = await asyncio.wait(
                    self._pending, timeout=max(0.0, min(self.budget.left(), self._next_hang())),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                tick = time.perf_counter()
                self._expire_hung_generations(done)
                for future in done:
                    kind, job, worker = self._pending.pop(future)
                    if kind == "llm":
                        self._free_llms[self._pool_of[worker[1]]].append(worker)
                        self._on_generated(job, future)
                    else:
                        self._on_executed(job, future, worker)
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
        executing = sum(1 for kind, _, _ in self._pending.values() if kind == "exec")
        counts = {
            "generating": len(self._pending) - executing,
            "executing": executing,
            "waiting": len(self._ready),
        }
        if len(self._queued) > 1:
            counts["queued for an LLM"] = self._n_queued()
        return counts

    # ---- scheduling --------------------------------------------------------------------

    def _n_in_flight(self) -> int:
        return sum(self._in_flight.values())

    def _n_queued(self) -> int:
        return sum(len(q) for q in self._queued.values())

    def _free_slot(self) -> bool:
        return any(self._free_llms.values())

    def _dispatch(self) -> None:
        while self._requeue and self._requeue[0][0].operator in ENGINE_WRITTEN:
            self._engine_job(*self._requeue.popleft())
        self._start_ready()
        for pool, queued in self._queued.items():  # proposals waiting for their model
            while queued and self._free_llms[pool]:
                self._generate(queued.popleft(), self._free_llms[pool].popleft())
        # Generate ahead while code waiting for executors stays under one per executor: a slow
        # LLM then never leaves executors idle, and waiting code is at most one round stale.
        while (self._free_slot() and len(self._ready) < self._n_executors
               and self._n_queued() < self._n_llm_slots):
            tokens = self.stats.prompt_tokens + self.stats.completion_tokens
            if self.budget.room(len(self.journal), self._n_in_flight(), tokens) <= 0:
                return
            if self._analysing():
                # Its findings join every later prompt: nothing else is generated before them.
                item = self._take_analysis()
                if item is None:
                    return
                proposal, attempt = item
            elif self._requeue:
                proposal, attempt = self._requeue.popleft()
                if proposal.parent_id is not None and proposal.parent_id not in self.journal:
                    continue
            else:
                proposals = self.policy.propose(self.journal, 1, dict(self._in_flight))
                if not proposals:
                    return
                proposal, attempt = proposals[0], 0
            if proposal.operator in ENGINE_WRITTEN:
                self._engine_job(proposal, attempt)
                self._start_ready()  # else it could wait while nothing else is in flight
                continue
            job = self._new_job(proposal, attempt)
            job.pool = self._route(proposal.operator)
            if job.pool not in self._free_llms:
                raise BackendError(f"no LLM actors serve {proposal.operator.value!r} "
                                   f"(pool {job.pool!r})")
            if self._free_llms[job.pool]:
                self._generate(job, self._free_llms[job.pool].popleft())
            else:
                self._queued[job.pool].append(job)

    def _start_ready(self) -> None:
        while self._ready and self._free_execs:
            self._execute(self._ready.popleft(), self._free_execs.popleft())

    def _engine_job(self, proposal: Proposal, attempt: int) -> None:
        """Code the engine writes itself (baseline root, ensembles): no LLM call, straight to
        the executors."""
        if proposal.operator is Operator.ENSEMBLE:
            ids = list(proposal.members)
            if not all(i in self.journal for i in ids):
                return  # a requeued ensemble whose members were never stored
            job = self._new_job(proposal, attempt)
            job.plan = ensemble_plan(ids, ensemble_vote(self.ctx))
            job.code = ensemble_code(self.ctx, [self.journal.get(i).code for i in ids])
        else:
            job = self._new_job(proposal, attempt)
            job.plan = "LightGBM with default settings on prepared features (engine baseline)"
            job.code = assemble(self.ctx, baseline_code(self.ctx))
        job.queued_at = time.time()
        self._running_code[code_hash(job.code)] = job.node_id
        self._ready.append(job)

    def _analysing(self) -> bool:
        """Whether an analysis step is queued or in flight."""
        return (any(op is Operator.ANALYZE for op, _ in self._in_flight)
                or any(p.operator is Operator.ANALYZE for p, _ in self._requeue))

    def _take_analysis(self) -> tuple[Proposal, int] | None:
        for item in self._requeue:
            if item[0].operator is Operator.ANALYZE:
                self._requeue.remove(item)
                return item
        return None

    def _new_job(self, proposal: Proposal, attempt: int) -> Job:
        self._in_flight[proposal.key] = self._in_flight.get(proposal.key, 0) + 1
        parent = self.journal.get(proposal.parent_id) if proposal.parent_id else None
        job = Job(proposal, secrets.token_hex(6), parent, time.time(), attempt=attempt)
        self.store.mark_in_flight(job.node_id, proposal)
        return job

    def _generate(self, job: Job, worker: tuple[Any, str]) -> None:
        _, name = worker
        actor = self._llm_actors[name]  # the live actor of this name (see restart_llm)
        if job.prompt is None:
            # A seed per request: the same prompt twice (improving one parent) must be free to
            # give two different replies; seeded from the run seed and step, so reproducible.
            self._requests += 1
            if (self.reflect and not job.reflected
                    and job.proposal.operator in (Operator.DEBUG, Operator.IMPROVE)):
                if job.proposal.operator is Operator.IMPROVE:
                    # Pinned: a sibling finishing before the code call would move the idea
                    # pool on, and the step would be asked for another change than reflected on.
                    job.proposal = replace(job.proposal,
                                           idea=improve_change(job.proposal, self.journal))
                prompt = reflect_prompt(self.ctx, job.proposal, self.journal)
            else:
                prompt = build_prompt(self.ctx, job.proposal, self.journal, job.reflection)
            job.prompt = replace(prompt, seed=self.ctx.seed * 100_003 + len(self.journal) * 101
                                 + self._requests)
        job.llm_actor = name
        job.llm_deadline = time.monotonic() + self.llm_timeout
        job.llm_handle = actor
        future = asyncio.ensure_future(_await(actor.generate.remote([job.prompt])))
        self._pending[future] = ("llm", job, worker)

    def _execute(self, job: Job, executor: Any) -> None:
        job.started_at = time.time()
        # The sandbox's own clock stops candidates at the deadline, so none outlives the run.
        job.exec_limit = max(1.0, min(self._exec_cap(job), self.budget.left()))
        limits = Limits(wall_seconds=job.exec_limit)
        future = asyncio.ensure_future(
            _await(executor.run.remote(job.code, self._inputs_ref, limits))
        )
        self._pending[future] = ("exec", job, executor)

    def _exec_cap(self, job: Job) -> float:
        if job.proposal.operator is Operator.ANALYZE:
            return min(self.exec_timeout, ANALYSIS_SECONDS)
        return self.exec_timeout

    # ---- LLM faults --------------------------------------------------------------------

    def _next_hang(self) -> float:
        """Seconds until the oldest generation in flight counts as hung."""
        deadlines = [job.llm_deadline for kind, job, _ in self._pending.values() if kind == "llm"]
        return min(deadlines) - time.monotonic() if deadlines else float("inf")

    def _expire_hung_generations(self, done: set[asyncio.Future[Any]]) -> None:
        """A generation past llm_timeout is lost and its actor replaced: a synchronous actor
        cannot cancel a running call, so killing it is the only way to get the slot back."""
        now = time.monotonic()
        for future, (kind, job, worker) in list(self._pending.items()):
            if kind != "llm" or future in done or job.llm_deadline > now:
                continue
            del self._pending[future]
            future.cancel()
            self._free_llms[self._pool_of[worker[1]]].append(worker)
            current: Any = self._llm_actors.get(job.llm_actor)
            if current is not None and current is job.llm_handle:
                ray.kill(current, no_restart=True)  # the hung actor is still the live one
            self._lose(job, f"LLM call timed out after {self.llm_timeout:g}s; actor replaced")
            self._replace_llm(job.llm_actor, job.llm_handle)

    def _replace_llm(self, name: str, dead: Any) -> None:
        """Start a new actor for `name` unless that was done already (several requests of one
        actor fail together); raise once it keeps dying."""
        if self.restart_llm is None or self._llm_actors.get(name) is not dead:
            return
        count = self._llm_restarts.get(name, 0) + 1
        if count > MAX_LLM_RESTARTS:
            raise BackendError(
                f"LLM actor {name} died or hung {count} times in a row; the backend is broken "
                "(check the model, memory, or --llm); finished nodes are stored, --resume later"
            )
        self._llm_restarts[name] = count
        self._llm_actors[name] = self.restart_llm(dead, name)

    # ---- results -----------------------------------------------------------------------

    def _on_generated(self, job: Job, future: asyncio.Future[Any]) -> None:
        try:
            reply: Reply = future.result()[0]
        except Exception as exc:  # a failed LLM call costs this node only
            self._lose(job, f"LLM call failed: {_short(exc)}")  # stored before any raise
            if isinstance(exc, ray.exceptions.RayActorError):
                self._replace_llm(job.llm_actor, job.llm_handle)
            return
        self._llm_restarts.pop(job.llm_actor, None)  # it answered: the actor is healthy
        job.model = reply.model
        job.llm_seconds += reply.seconds
        job.prompt_tokens += reply.prompt_tokens
        job.completion_tokens += reply.completion_tokens
        self.stats.prompt_tokens += reply.prompt_tokens
        self.stats.completion_tokens += reply.completion_tokens
        self.stats.llm_seconds += reply.seconds
        if job.prompt is not None and job.prompt.tag == Operator.REFLECT.value:
            job.reflected = True
            job.reflection = clean_reflection(reply.text)
            job.prompt = None  # the step's own prompt, built with the reflection in it
            self._generate(job, self._free_llms[job.pool].pop())  # the worker freed just now
            return
        job.reply = reply.text
        if job.proposal.operator is Operator.INSIGHTS:
            self._on_insights(job, reply)
            return
        if job.proposal.operator is Operator.ANALYZE:
            parsed = parse_analysis(reply.text, self.ctx)
        else:
            parsed = parse_reply(reply.text, self.ctx)
        job.plan = parsed.plan or job.plan
        if parsed.problem and not job.repaired and job.prompt is not None:
            job.repaired = True
            self.stats.repairs += 1
            job.prompt = repair_prompt(job.prompt, reply.text, parsed.problem)
            self._generate(job, self._free_llms[job.pool].pop())  # the worker freed just now
            return
        job.code = parsed.code
        if parsed.problem:
            self._finish(job, Status.BUGGY, error=parsed.problem)
            return
        digest = code_hash(job.code)
        twin = self.journal.find_code(digest) or self._running_code.get(digest)
        if twin is not None:
            self.stats.duplicates += 1
            job.code = ""  # not run, so nothing to debug: the twin holds the code
            self._finish(job, Status.BUGGY, error=f"duplicate of node {twin}: identical code, "
                                                  "not run again")
            return
        job.queued_at = time.time()
        self._running_code[digest] = job.node_id
        self._ready.append(job)

    def _on_insights(self, job: Job, reply: Reply) -> None:
        """An insights reply is ideas, not code: nothing runs. The node is `ok` with the ideas
        as its plan (a JSON list) and no metric, or `buggy` when none could be read."""
        parsed = parse_insights(reply.text)
        if parsed.problem and not job.repaired and job.prompt is not None:
            job.repaired = True
            self.stats.repairs += 1
            job.prompt = repair_prompt(job.prompt, reply.text, parsed.problem, INSIGHTS_ASK)
            self._generate(job, self._free_llms[job.pool].pop())  # the worker freed just now
            return
        if parsed.problem:
            self._finish(job, Status.BUGGY, error=parsed.problem)
            return
        job.plan = encode_insights(parsed.insights)
        self._finish(job, Status.OK)

    def _on_executed(self, job: Job, future: asyncio.Future[Any], executor: Any) -> None:
        try:
            outcome = future.result()
        except Exception as exc:  # a dead executor costs this node only
            if isinstance(exc, ray.exceptions.RayActorError) and self.restart_executor:
                executor = self.restart_executor(executor)
            self._free_execs.append(executor)
            self._lose(job, f"executor failed: {_short(exc)}")
            return
        self._free_execs.append(executor)
        result: ExecResult = outcome.result
        measured, stdout = split_measurements(result.stdout_tail)
        result = replace(result, stdout_tail=stdout)
        status, error = Status(result.status), result.error
        metric_raw = test_raw = train_raw = None
        if status is Status.TIMEOUT and job.exec_limit < self._exec_cap(job):
            status, error = Status.KILLED, DEADLINE_ERROR
        if job.proposal.operator is Operator.ANALYZE:
            # Nothing to score: what it printed is the result.
            silent = silent_analysis_error(result.stdout_tail)
            if status is Status.OK and silent:
                status, error = Status.BUGGY, silent
        elif status is Status.OK:
            try:
                metric_raw = score(self.task, result.valid_csv, "valid")
                test_raw = score(self.task, result.test_csv, "test")
            except SubmissionError as exc:
                status, error, metric_raw, test_raw = Status.BUGGY, str(exc), None, None
            else:
                train_raw = score_train(self.task, result.train_csv)
        self._finish(
            job, status, error=error, result=result, metric_raw=metric_raw, test_raw=test_raw,
            executor=outcome.executor, node_ip=outcome.node_ip, measured=measured,
            train_raw=train_raw,
        )

    def _lose(self, job: Job, error: str) -> None:
        """Record a node lost to infrastructure and re-propose it once."""
        self.stats.lost += 1
        self._finish(job, Status.LOST, error=error)
        if job.attempt < 1:
            self._requeue.append((job.proposal, job.attempt + 1))

    def _finish(self, job: Job, status: Status, *, error: str = "",
                result: ExecResult | None = None, metric_raw: float | None = None,
                test_raw: float | None = None, executor: str = "", node_ip: str = "",
                measured: Measurements | None = None, train_raw: float | None = None) -> None:
        if job.code:
            self._running_code.pop(code_hash(job.code), None)
        key = job.proposal.key
        self._in_flight[key] -= 1
        if not self._in_flight[key]:
            del self._in_flight[key]
        now = time.time()
        node = Node(
            node_id=job.node_id,
            parent_id=job.proposal.parent_id,
            operator=job.proposal.operator,
            status=status,
            step=len(self.journal),
            depth=0 if job.parent is None else job.parent.depth + 1,
            run_id=self.store.run_id,
            policy=self.policy.name,
            plan=job.plan,
            hint=job.proposal.hint,
            code=job.code,
            code_hash=code_hash(job.code) if job.code else "",
            exit_code=result.exit_code if result else None,
            error=error,
            stdout_tail=result.stdout_tail if result else "",
            stderr_tail=result.stderr_tail if result else "",
            metric=None if metric_raw is None else self.task.metric.normalise(metric_raw),
            metric_raw=metric_raw,
            self_reported=self_reported_metric(result.stdout_tail)
            if result and job.proposal.operator is not Operator.ANALYZE else None,
            exec_seconds=result.seconds if result else 0.0,
            llm_seconds=job.llm_seconds,
            queue_seconds=max(0.0, job.started_at - job.queued_at) if job.queued_at else 0.0,
            prompt_tokens=job.prompt_tokens,
            completion_tokens=job.completion_tokens,
            temperature=job.proposal.temperature,
            model=job.model,
            llm_actor=job.llm_actor,
            executor=executor,
            node_ip=node_ip,
            created_at=job.created_at,
            finished_at=now,
            **(measured or Measurements()).node_fields(),
            train_metric_raw=train_raw,
            flags=",".join(implementation_flags(self.task.metric, job.code, metric_raw,
                                                train_raw)),
            reflection=job.reflection,
            prompt=json.dumps(job.prompt.messages) if job.reply and job.prompt else "",
            reply=job.reply,
        )
        previous_best = self.journal.best()
        try:
            if metric_raw is not None and result is not None:
                # Before the node's row: a stored scored node always has its predictions.
                self.store.write_predictions(node.node_id, result)
            self.store.append(node, test_raw)
        except OSError as exc:
            # A full or failing disk: stop now rather than run nodes that cannot be kept. Every
            # part written so far is whole (write, fsync, rename), and this node's in-flight
            # note stays, so a resume re-proposes it.
            raise StoreError(f"cannot store node {node.node_id} in {self.store.nodes_dir}: "
                             f"{_short(exc)}; free disk space, then --resume "
                             f"{self.store.root}") from exc
        self.journal.add(node)
        if node.operator is Operator.ANALYZE:
            self._after_analysis(node)
        if error not in (DEADLINE_ERROR, STOPPED_ERROR):
            # Work stopped by a deadline or Ctrl-C stays marked, so a resume re-proposes it.
            self.store.clear_in_flight(job.node_id)
        if self.journal.best() is not previous_best and result is not None:
            self.store.write_best(node, result.valid_csv, result.test_csv)
        self.policy.observe(node)
        self.stats.nodes = len(self.journal)
        self.stats.test_scores[node.node_id] = test_raw
        self.on_node(node, self.stats)

    def _after_analysis(self, node: Node) -> None:
        """Findings into every later prompt; a failed analysis gets one retry, then the search
        goes on without findings."""
        findings = analysis_findings(self.journal)
        if findings:
            self.ctx = replace(self.ctx, findings=findings)
        elif node.status not in (Status.LOST, Status.KILLED):  # those are re-proposed anyway
            retry = next_analysis(self.journal)
            if retry is not None:
                self._requeue.appendleft((retry, 0))

    def _stop_in_flight(self, reason: str) -> None:
        """Record everything still running as killed, then drop it."""
        for future, (_kind, job, _worker) in list(self._pending.items()):
            future.cancel()
            self._finish(job, Status.KILLED, error=reason)
        self._pending.clear()
        for job in [*self._ready, *(j for q in self._queued.values() for j in q)]:
            self._finish(job, Status.KILLED, error=reason)
        self._ready.clear()
        for queued in self._queued.values():
            queued.clear()


async def _await(ref: Any) -> Any:
    return await ref


def _short(exc: BaseException) -> str:
    # A RayTaskError's text is the remote traceback, whose first 300 characters never reach
    # the cause: name the exception the remote code raised instead.
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        exc = cause
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"

