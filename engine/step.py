"""One node's life, top to bottom: a pure state machine from a proposal to a finished Node.

A `Step` says what it needs next, an LLM reply (`Generate`), a sandboxed run (`Execute`) or
nothing more (`Done`, holding the node), and takes the answers back through `on_reply` and
`on_result`. It holds no Ray and does no I/O: the loop (`engine/loop.py`) only schedules what
steps ask for onto the LLM and executor pools, and the benchmarks that replay steps drive the
same class one call at a time (`run_step`).

Per operator:
- baseline, ensemble: code the engine writes itself, straight to execution (no LLM call).
- draft, improve, debug, sela: [a reflection first: --reflect, debug and improve only] -> code
  -> [one repair re-ask when the reply has no usable code] -> duplicate check -> execution ->
  scored in the driver on hidden labels.
- insights: ideas -> [one repair re-ask] -> done; nothing runs.
- analyze: an exploration script -> [one repair re-ask] -> execution with a shorter cap; what
  it prints is its result.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.scoring import SubmissionError, score, score_train
from engine.task import PreparedTask
from operators.analyst import (
    ANALYSIS_SECONDS,
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
from search.journal import Journal
from search.node import Node, Operator, Status, code_hash
from search.policy import Proposal
from search.sela import encode_insights

DEADLINE_ERROR = "stopped at the budget deadline"
STOPPED_ERROR = "stopped by the user"
ENGINE_WRITTEN = (Operator.BASELINE, Operator.ENSEMBLE)
BASELINE_PLAN = "LightGBM with default settings on prepared features (engine baseline)"


@dataclass
class SearchContext:
    """What the steps of one search start share: the task (for scoring), what the prompts
    know (`ctx`, which gains the analyst's findings), the Journal, and the code queued or
    running (a reply repeating it is not run again)."""

    task: PreparedTask
    ctx: TaskContext
    journal: Journal
    run_id: str = ""
    policy: str = ""
    exec_timeout: float = 300.0
    reflect: bool = False  # --reflect: a reflection call before every debug and improve step
    # A reply repeating code already in the Journal or running is not run again (seed 002);
    # a replay benchmark, measuring each sample as it runs, turns this off.
    skip_duplicates: bool = True
    running: dict[str, str] = field(default_factory=dict)  # code hash -> node id
    requests: int = 0  # first prompts built so far: part of each one's sampling seed

    def next_seed(self) -> int:
        """A seed per request: the same prompt twice (improving one parent) must be free to
        give two different replies; derived from the run seed and step, so reproducible."""
        self.requests += 1
        return self.ctx.seed * 100_003 + len(self.journal) * 101 + self.requests

    def stale(self, proposal: Proposal) -> bool:
        """A proposal (re-queued from an earlier start) that names nodes never stored."""
        named = [proposal.parent_id, *proposal.members] if proposal.parent_id else [
            *proposal.members]
        return any(node_id not in self.journal for node_id in named)

    def after_analysis(self, node: Node) -> Proposal | None:
        """Findings into every later prompt; a failed analysis gets one retry (returned),
        then the search goes on without findings."""
        findings = analysis_findings(self.journal)
        if findings:
            self.ctx = replace(self.ctx, findings=findings)
            return None
        if node.status in (Status.LOST, Status.KILLED):  # those are re-proposed anyway
            return None
        return next_analysis(self.journal)


@dataclass(frozen=True, slots=True)
class Generate:
    """The step needs the reply to `prompt`."""

    prompt: ChatPrompt


@dataclass(frozen=True, slots=True)
class Execute:
    """The step needs `code` run in the sandbox, for at most `seconds`."""

    code: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Done:
    """The step is over: `node` is its record, `test_raw` its test score (kept beside the
    node, never in it), `result` the run whose submission it scored (None when none ran)."""

    node: Node
    test_raw: float | None
    result: ExecResult | None


Need = Generate | Execute | Done


class Step:
    """One expansion of the tree, from its proposal to its Node."""

    def __init__(self, proposal: Proposal, search: SearchContext, *, attempt: int = 0,
                 node_id: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self.proposal = proposal
        self.search = search
        self.attempt = attempt  # how often this proposal was lost to a dead worker
        self.node_id = node_id or secrets.token_hex(6)
        self.parent = search.journal.get(proposal.parent_id) if proposal.parent_id else None
        self._clock = clock
        self.created_at = clock()
        self.prompt: ChatPrompt | None = None  # the request asked (or to ask) now
        self.reflecting = (search.reflect
                           and proposal.operator in (Operator.DEBUG, Operator.IMPROVE))
        self.reflection = ""
        self.plan = ""
        self.code = ""
        self.reply = ""  # raw text of the reply that gave the code
        self.model = ""
        self.llm_actor = ""  # the LLM actor serving its latest request (set by the scheduler)
        self.llm_seconds = 0.0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.repaired = False
        self.duplicate = False
        self.queued_at = 0.0
        self.started_at = 0.0
        self.exec_limit = 0.0
        self._done: Done | None = None
        if proposal.operator in ENGINE_WRITTEN:
            self._engine_code()

    # ---- what it needs ---------------------------------------------------------------------

    @property
    def operator(self) -> Operator:
        return self.proposal.operator

    @property
    def exec_cap(self) -> float:
        """Seconds its script may run: the analysis is a preamble every draft waits for, not
        a candidate, so it gets less time than one."""
        if self.operator is Operator.ANALYZE:
            return min(self.search.exec_timeout, ANALYSIS_SECONDS)
        return self.search.exec_timeout

    def next(self) -> Need:
        if self._done is not None:
            return self._done
        if self.queued_at:
            return Execute(self.code, self.exec_cap)
        if self.prompt is None:
            self.prompt = replace(self._first_prompt(), seed=self.search.next_seed())
        return Generate(self.prompt)

    def _first_prompt(self) -> ChatPrompt:
        search = self.search
        if self.reflecting:
            if self.operator is Operator.IMPROVE:
                # Pinned: a sibling finishing before the code call would move the idea pool
                # on, and the step would be asked for another change than reflected on.
                self.proposal = replace(self.proposal,
                                        idea=improve_change(self.proposal, search.journal))
            return reflect_prompt(search.ctx, self.proposal, search.journal)
        return build_prompt(search.ctx, self.proposal, search.journal, self.reflection)

    def _engine_code(self) -> None:
        ctx = self.search.ctx
        if self.operator is Operator.ENSEMBLE:
            members = list(self.proposal.members)
            self.plan = ensemble_plan(members, ensemble_vote(ctx))
            self.code = ensemble_code(ctx, [self.search.journal.get(i).code for i in members])
        else:
            self.plan = BASELINE_PLAN
            self.code = assemble(ctx, baseline_code(ctx))
        self._queue()

    # ---- answers ---------------------------------------------------------------------------

    def on_reply(self, reply: Reply) -> None:
        self.model = reply.model
        self.llm_seconds += reply.seconds
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        if self.reflecting:
            self.reflecting = False
            self.reflection = clean_reflection(reply.text)
            self.prompt = None  # the step's own prompt, built with the reflection in it
            return
        self.reply = reply.text
        if self.operator is Operator.INSIGHTS:
            self._on_insights(reply.text)
            return
        if self.operator is Operator.ANALYZE:
            parsed = parse_analysis(reply.text, self.search.ctx)
        else:
            parsed = parse_reply(reply.text, self.search.ctx)
        self.plan = parsed.plan or self.plan
        if parsed.problem and self._repair(reply.text, parsed.problem):
            return
        self.code = parsed.code
        if parsed.problem:
            self._finish(Status.BUGGY, error=parsed.problem)
            return
        digest = code_hash(self.code)
        twin = self.search.journal.find_code(digest) or self.search.running.get(digest)
        if twin is not None and self.search.skip_duplicates:
            self.duplicate = True
            self.code = ""  # not run, so nothing to debug: the twin holds the code
            self._finish(Status.BUGGY,
                         error=f"duplicate of node {twin}: identical code, not run again")
            return
        self._queue()

    def _on_insights(self, text: str) -> None:
        """An insights reply is ideas, not code: nothing runs. The node is `ok` with the ideas
        as its plan (a JSON list) and no metric, or `buggy` when none could be read."""
        parsed = parse_insights(text)
        if parsed.problem and self._repair(text, parsed.problem, INSIGHTS_ASK):
            return
        if parsed.problem:
            self._finish(Status.BUGGY, error=parsed.problem)
            return
        self.plan = encode_insights(parsed.insights)
        self._finish(Status.OK)

    def _repair(self, text: str, problem: str, ask: str | None = None) -> bool:
        """Re-ask once when a reply has no usable code (or ideas); False when it was already."""
        if self.repaired or self.prompt is None:
            return False
        self.repaired = True
        self.prompt = repair_prompt(self.prompt, text, problem, ask)
        return True

    def _queue(self) -> None:
        self.queued_at = self._clock()
        self.search.running[code_hash(self.code)] = self.node_id

    def on_started(self, limit: float) -> None:
        """Its execution started, stopped by the sandbox after `limit` seconds."""
        self.started_at = self._clock()
        self.exec_limit = limit

    def on_result(self, result: ExecResult, *, executor: str = "", node_ip: str = "") -> None:
        """Score the run in the driver, against labels that never left it."""
        measured, stdout = split_measurements(result.stdout_tail)
        result = replace(result, stdout_tail=stdout)
        status, error = Status(result.status), result.error
        metric_raw = test_raw = train_raw = None
        if status is Status.TIMEOUT and self.exec_limit < self.exec_cap:
            status, error = Status.KILLED, DEADLINE_ERROR
        if self.operator is Operator.ANALYZE:
            # Nothing to score: what it printed is the result.
            silent = silent_analysis_error(result.stdout_tail)
            if status is Status.OK and silent:
                status, error = Status.BUGGY, silent
        elif status is Status.OK:
            task = self.search.task
            try:
                metric_raw = score(task, result.valid_csv, "valid")
                test_raw = score(task, result.test_csv, "test")
            except SubmissionError as exc:
                status, error, metric_raw, test_raw = Status.BUGGY, str(exc), None, None
            else:
                train_raw = score_train(task, result.train_csv)
        self._finish(status, error=error, result=result, metric_raw=metric_raw,
                     test_raw=test_raw, train_raw=train_raw, executor=executor,
                     node_ip=node_ip, measured=measured)

    def lose(self, error: str) -> Done:
        """Lost to infrastructure (a dead or hung worker, a failed LLM call)."""
        return self._finish(Status.LOST, error=error)

    def kill(self, reason: str) -> Done:
        """Stopped before it finished (the deadline, Ctrl-C)."""
        return self._finish(Status.KILLED, error=reason)

    # ---- the record ------------------------------------------------------------------------

    def _finish(self, status: Status, *, error: str = "", result: ExecResult | None = None,
                metric_raw: float | None = None, test_raw: float | None = None,
                train_raw: float | None = None, executor: str = "", node_ip: str = "",
                measured: Measurements | None = None) -> Done:
        search = self.search
        if self.code:
            search.running.pop(code_hash(self.code), None)
        node = Node(
            node_id=self.node_id,
            parent_id=self.proposal.parent_id,
            operator=self.operator,
            status=status,
            step=len(search.journal),
            depth=0 if self.parent is None else self.parent.depth + 1,
            run_id=search.run_id,
            policy=search.policy,
            plan=self.plan,
            hint=self.proposal.hint,
            code=self.code,
            code_hash=code_hash(self.code) if self.code else "",
            exit_code=result.exit_code if result else None,
            error=error,
            stdout_tail=result.stdout_tail if result else "",
            stderr_tail=result.stderr_tail if result else "",
            metric=None if metric_raw is None else search.task.metric.normalise(metric_raw),
            metric_raw=metric_raw,
            self_reported=self_reported_metric(result.stdout_tail)
            if result and self.operator is not Operator.ANALYZE else None,
            exec_seconds=result.seconds if result else 0.0,
            llm_seconds=self.llm_seconds,
            queue_seconds=max(0.0, self.started_at - self.queued_at) if self.queued_at else 0.0,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            temperature=self.proposal.temperature,
            model=self.model,
            llm_actor=self.llm_actor,
            executor=executor,
            node_ip=node_ip,
            created_at=self.created_at,
            finished_at=self._clock(),
            **(measured or Measurements()).node_fields(),
            train_metric_raw=train_raw,
            flags=",".join(implementation_flags(search.task.metric, self.code, metric_raw,
                                                train_raw)),
            reflection=self.reflection,
            prompt=json.dumps(self.prompt.messages) if self.reply and self.prompt else "",
            reply=self.reply,
        )
        self._done = Done(node, test_raw, result)
        return self._done


def run_step(step: Step, generate: Callable[[ChatPrompt], Reply],
             execute: Callable[[str, Limits], ExecResult]) -> Done:
    """Drive a step to its end one call at a time (benchmarks that replay steps)."""
    while True:
        need = step.next()
        if isinstance(need, Done):
            return need
        if isinstance(need, Generate):
            step.on_reply(generate(need.prompt))
        else:
            step.on_started(need.seconds)
            step.on_result(execute(need.code, Limits(wall_seconds=need.seconds)))
