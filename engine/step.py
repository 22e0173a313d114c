"""One node's life, top to bottom: a pure state machine from a proposal to a finished Node.

A `Step` says what it needs next, an LLM reply (`Generate`), a sandboxed run (`Execute`) or
nothing more (`Done`, holding the node), and takes the answers back through `on_reply` and
`on_result`. It holds no Ray and does no I/O: the loop (`engine/loop.py`) only schedules what
steps ask for onto the LLM and executor pools, and the benchmarks that replay steps drive the
same class one call at a time (`run_step`).

What differs between operators (prompt, reply reading, engine-written code, run limit) the
step asks of the operator's module (`operators.kinds.kind_of`). The shapes of a life:
- engine-written (baseline, ensemble, portfolio, tune, case): code -> execution, no LLM call;
  an ensemble is blended here from its members' kept predictions and nothing runs.
- LLM-written (draft, improve, debug, sela, recall): [a reflection first: --reflect, kinds
  that reflect] -> code -> [one repair re-ask when the reply has no usable code] -> duplicate
  check -> execution -> scored in the driver on hidden labels.
- features: a program -> its checks (a refusal ends it: no re-ask) -> the engine's code around
  it, every fold in one process (fitting the gate's sides without the program only when the
  search has not kept them for its reference) -> scored and gated against its reference.
- insights: ideas -> [one repair re-ask] -> done; nothing runs.
- analyze (unscored): a script -> [one repair re-ask] -> one run; what it prints is its result.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import pandas as pd

from common.chat import ChatPrompt, Reply
from engine.evaluation.blend import ensemble_selection
from engine.evaluation.program_gate import GateRound, gate_round
from engine.evaluation.scoring import (
    HeldOut,
    SubmissionError,
    read_stacked,
    read_submission,
    score_held_out,
    score_train,
)
from engine.search_context import ALL_FOLDS, Running, SearchContext, reference_key
from operators.features import added_columns
from operators.fitted import fold_states
from operators.flags import implementation_flags
from operators.harness import model_part
from operators.kinds import kind_of, repair_prompt
from operators.kinds.ensemble import ensemble_cost, ensemble_written
from operators.measure import Measurements, split_measurements
from operators.params import params_json
from operators.replies import clean_reflection, self_reported_metric
from sandbox import ExecResult, Limits
from search.node import Node, Operator, Status, code_hash
from search.policy import Proposal
from search.programs import REJECTED, judge, screen

DEADLINE_ERROR = "stopped at the budget deadline"
STOPPED_ERROR = "stopped by the user"
# Where a feature program's second-pair run (an all-folds run) is among the step's results.
SECOND_PAIR = -2
ENGINE_WRITTEN = tuple(op for op in Operator if op.traits.engine_written)


@dataclass(frozen=True, slots=True)
class Generate:
    """The step needs the reply to `prompt`."""

    prompt: ChatPrompt




@dataclass(frozen=True, slots=True)
class Execute:
    """The step needs `code` run in the sandbox once per fold of `folds` (each its own run,
    on that fold's inputs; ALL_FOLDS: one run on the all-folds inputs), each for at most
    `seconds`."""

    code: str
    seconds: float
    folds: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Done:
    """The step is over: `node` is its record, `test_raw` its test score (kept beside the
    node, never in it), `predictions` what it scored (None when nothing was scored)."""

    node: Node
    test_raw: float | None
    predictions: HeldOut | None = None
    # The fold models an all-folds run of make_model() code kept (operators/harness.py), one
    # per fold; None when it kept none.
    fold_models: list[bytes] | None = None


Need = Generate | Execute | Done | None  # None: nothing new until an answer arrives


class Step:
    """One expansion of the tree, from its proposal to its Node.

    Execution: engine-written code runs every fold in one process (it is the engine's own,
    so it may read every dev label), and so does a feature program's (the engine's model code
    around a function that passed the text checks, operators/features.py); any other code
    runs each fold in its own sandbox, whose
    held-out rows carry no labels, fold 0 first: a script that fails there fails fast, and
    only a script that ran is given the other folds (in parallel).
    """

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
        self._asked = False  # the current prompt was handed out and awaits its reply
        self.kind = kind_of(proposal.operator)
        self.reflecting = search.reflect and self.kind.reflects
        self.reflection = ""
        self.plan = ""
        self.code = ""
        self.run_code = ""  # what the sandbox runs: `code`, or its all-folds form
        self.reply = ""  # raw text of the reply that gave the code
        self.model = ""
        self.llm_actor = ""  # the LLM actor serving its latest request (see `generating`)
        self.llm_seconds = 0.0
        self._generating_since = 0.0  # when an actor took the request awaiting its reply
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.repaired = False
        self.duplicate = False
        self.gate = ""  # a feature program's comparison with its reference (JSON)
        # its reference's gate sides without the program, kept by the search from an earlier
        # program's run: this one's run fits the sides with the program alone
        self._kept_sides: list[pd.DataFrame] | None = None
        # its code fitting the later seeds' pairs (EngineCode.second_pair)
        self._second_pair: tuple[str, str] | tuple[()] = ()
        # While its second pair runs (search.programs.screen): what its first run gave the
        # gate, the columns its program added, and the node's record to make once the second
        # pair has run.
        self._awaiting: tuple[GateRound, tuple[str, ...], Callable[[], Done]] | None = None
        self.queued_at = 0.0
        self._to_run: tuple[int, ...] = ()  # folds wanted and not handed out yet
        self._handed_out: set[int] = set()  # folds handed out whose run has not ended
        self._running: dict[int, tuple[float, float]] = {}  # fold -> (started at, limit)
        self._results: dict[int, tuple[ExecResult, str, str, float]] = {}  # + executor, ip
        self._done: Done | None = None
        if proposal.operator.traits.engine_written:
            self._engine_code()

    # ---- what it needs ---------------------------------------------------------------------

    @property
    def operator(self) -> Operator:
        return self.proposal.operator

    @property
    def over(self) -> bool:
        return self._done is not None

    @property
    def exec_cap(self) -> float:
        """Seconds one run may take (the operator's kind says, from the search's caps)."""
        return self.kind.seconds(self.search.exec_timeout, self.search.floor_seconds)

    def next(self) -> Need:
        """What the step needs now; each request is handed out once (None until an answer
        arrives), Done for good once it is over."""
        if self._done is not None:
            return self._done
        if self._to_run:
            folds, self._to_run = self._to_run, ()
            self._handed_out.update(folds)
            return Execute(self.run_code, self.exec_cap, folds)
        if self.queued_at or self._asked:
            return None
        if self.prompt is None:
            self.prompt = replace(self._first_prompt(), seed=self.search.next_seed())
        self._asked = True
        return Generate(self.prompt)

    def _first_prompt(self) -> ChatPrompt:
        search = self.search
        if self.reflecting:
            # The code call must ask for what was reflected on.
            self.proposal = self.kind.pinned(self.proposal, search.journal)
            return kind_of(Operator.REFLECT).prompt(search.ctx, self.proposal, search.journal)
        return self.kind.steered(
            self.kind.prompt(search.ctx, self.proposal, search.journal, self.reflection),
            self._siblings())

    def _siblings(self) -> list[str]:
        """The code of the steps of this operator on this parent that is queued or running."""
        return [r.code for r in self.search.running.values()
                if r.operator is self.operator and r.parent_id == self.proposal.parent_id]

    def _engine_code(self) -> None:
        if self.operator.traits.combines:
            self._blend()
            return
        search = self.search
        written = self.kind.engine_code(search.ctx, self.proposal, search.journal)
        self.plan, self.code = written.plan, written.code
        if written.all_folds_code:
            self._queue(written.all_folds_code, (ALL_FOLDS,))
        else:
            self._queue(self.code, (0,))

    def _blend(self) -> None:
        """Ensemble selection over the candidates' kept predictions: done at once, in the
        driver; nothing runs (engine/evaluation/blend.py)."""
        search = self.search
        kept = {i: search.predictions[i] for i in self.proposal.members
                if i in search.predictions}
        truth = search.dev_labels.iloc[search.fold_plan.held_out]
        weights, predictions = ensemble_selection(search.task, kept, truth)
        if predictions is None:
            self._finish(Status.BUGGY, error="no kept predictions of the candidates")
            return
        members = [search.journal.get(i) for i in weights]
        written = ensemble_written(search.ctx, members, weights, len(kept))
        self.plan, self.code = written.plan, written.code
        self._finish(Status.OK, predictions=predictions, measured=ensemble_cost(members))

    def _queue(self, run_code: str, folds: tuple[int, ...]) -> None:
        self.run_code = run_code
        self.queued_at = self._clock()
        self._to_run = folds
        self.search.running[code_hash(self.code)] = Running(
            self.node_id, self.operator, self.proposal.parent_id, self.code)

    # ---- answers ---------------------------------------------------------------------------

    def generating(self, actor: str) -> None:
        """The scheduler handed the request to `actor`, which works on it from now."""
        self.llm_actor = actor
        self._generating_since = self._clock()

    def on_reply(self, reply: Reply) -> None:
        self._asked = False
        self._generating_since = 0.0
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
        parsed = self.kind.read(reply.text, self.search.ctx, self.proposal,
                                self.search.journal)
        self.plan = parsed.plan or self.plan
        if parsed.problem and self._repair(reply.text, parsed.problem):
            return
        self.code = parsed.code
        if parsed.problem:
            self._finish(Status.BUGGY, error=parsed.problem)
            return
        written = self.kind.assembled(self.code, self.search.ctx, self.proposal,
                                      self.search.journal)
        self.code = written.code
        if not self.kind.executes:  # the reply is the result (ideas): nothing runs
            self._finish(Status.OK)
            return
        search = self.search
        digest = code_hash(self.code)
        running = search.running.get(digest)
        twin = search.journal.find_code(digest) or (running.node_id if running else None)
        if twin is not None and search.skip_duplicates:
            self.duplicate = True
            self.code = ""  # not run, so nothing to debug: the twin holds the code
            self._finish(Status.BUGGY,
                         error=f"duplicate of node {twin}: identical code, not run again")
            return
        siblings = self._siblings()
        repeated = (self.kind.repeats(self.code, siblings)
                    if siblings and search.skip_duplicates else "")
        if repeated:
            self.code = parsed.code  # as a refusal on its text records it
            self._finish(Status.BUGGY, error=repeated)
            return
        if written.with_program_code:
            self._kept_sides = search.reference_sides.get(reference_key(self.proposal))
            self._second_pair = written.second_pair
        if self._kept_sides:
            self._queue(written.with_program_code, (ALL_FOLDS,))
        elif written.all_folds_code:
            self._queue(written.all_folds_code, (ALL_FOLDS,))
        else:
            self._queue(self.code, (0,))

    def _repair(self, text: str, problem: str) -> bool:
        """Re-ask once when a reply has no usable code (or ideas); False when it was already,
        or when its operator does not re-ask."""
        if self.repaired or self.prompt is None or not self.kind.re_asks:
            return False
        self.repaired = True
        self.prompt = repair_prompt(self.prompt, text, problem)
        return True

    def on_started(self, fold: int, limit: float) -> None:
        """A run of `fold` started, stopped by the sandbox after `limit` seconds."""
        self._running[fold] = (self._clock(), limit)

    def on_result(self, fold: int, result: ExecResult, *, executor: str = "",
                  node_ip: str = "") -> None:
        """A run of `fold` ended. Once fold 0 ran, the others are wanted; once every fold
        ran, the node is scored in the driver, against labels that never left it."""
        started, limit = self._running.pop(fold)
        self._handed_out.discard(fold)
        if result.status == Status.TIMEOUT.value and limit < self.exec_cap:
            result = replace(result, status=Status.KILLED.value, error=DEADLINE_ERROR)
        key = SECOND_PAIR if self._awaiting else fold
        self._results[key] = (result, executor, node_ip, started)
        folds = self.search.fold_plan.k
        if (fold == 0 and result.status == Status.OK.value and folds > 1
                and self.operator.traits.scored):
            self._to_run = tuple(range(1, folds))
            return
        if not self._handed_out and not self._to_run:
            self._conclude()

    def _conclude(self) -> None:
        """Every run wanted has ended: the node's status, measurements and scores."""
        if self._awaiting is not None:
            self._second_pair_ran(*self._awaiting)
            return
        runs = sorted(self._results)
        failed = [f for f in runs if self._results[f][0].status != Status.OK.value]
        first, executor, node_ip, _ = self._results[failed[0] if failed else runs[0]]
        measured, stdout = split_measurements(first.stdout_tail)
        first = replace(first, stdout_tail=stdout)
        status, error = Status(first.status), first.error
        if REJECTED in error:  # a feature program's checks on the rows refused it: the
            # reason alone, not where in the engine's check it was raised
            error = error[error.index(REJECTED):].split(" (line ")[0]
        predictions, train_raw, added = None, None, None
        if not self.operator.traits.scored:
            # Nothing to score: what it printed is the result.
            failure = self.kind.printed_failure(first.stdout_tail)
            if status is Status.OK and failure:
                status, error = Status.BUGGY, failure
        elif status is Status.OK:
            try:
                predictions = self._score()
            except SubmissionError as exc:
                status, error = Status.BUGGY, str(exc)
            else:
                learn = self.search.fold_plan.learn_rows(max(runs[0], 0))
                train_raw = score_train(self.search.task, first.train_csv,
                                        self.search.dev_labels.iloc[learn])
                if self.operator.traits.program:
                    added = added_columns(first.stdout_tail)
        kept = None
        if predictions is not None and ALL_FOLDS in self._results:
            kept = fold_states(self._results[ALL_FOLDS][0].fitted)
            if kept is not None and len(kept) != self.search.fold_plan.k:
                kept = None
        ending = partial(self._finish, status, error=error, result=first,
                         predictions=predictions, train_raw=train_raw, executor=executor,
                         node_ip=node_ip, measured=measured, fold_models=kept)
        if added is not None and (first_pair := self._gate_first_pair(added)) is not None:
            self._awaiting = first_pair, added, ending
            return
        ending()

    def _score(self) -> HeldOut:
        search, folds = self.search, self.search.fold_plan
        task = search.task
        held = folds.held_out
        if ALL_FOLDS in self._results:
            result = self._results[ALL_FOLDS][0]
            valid = [read_submission(task, result.valid_csv, "valid", len(held))]
            tests = read_stacked(task, result.test_csv, "test", len(task.test_X), folds.k)
            rows = [held]
        else:
            valid, tests, rows = [], [], []
            for fold in range(folds.k):
                result = self._results[fold][0]
                part = folds.rows(fold)
                valid.append(read_submission(task, result.valid_csv, "valid", len(part)))
                tests.append(read_submission(task, result.test_csv, "test"))
                rows.append(part)
        return score_held_out(task, search.dev_labels.iloc[held], valid, rows, tests)

    def _gate_first_pair(self, added: tuple[str, ...]) -> GateRound | None:
        """Gate the program on its first run's pair; its gains when its second pair is to run
        first (search.programs.screen), else None."""
        search, folds = self.search, self.search.fold_plan
        run = self._results.get(ALL_FOLDS)
        kept = self._kept_sides or []
        pairs = gate_round(search.task, folds, search.dev_labels.iloc[folds.held_out],
                           run[0].gate_csv if run is not None else None, kept[:1])
        reference = self.proposal.idea
        if pairs.problem:
            self.gate = pairs.unjudged(reference, added).to_json()
            return None
        if not kept:
            search.keep_reference_sides(reference_key(self.proposal), list(pairs.without))
        if self._second_pair:
            screened = screen(reference, added, pairs.seed_gains, pairs.reused)
            if screened is None:
                both, alone = self._second_pair
                self.run_code, self._to_run = (alone if len(kept) > 1 else both), (ALL_FOLDS,)
                return pairs
            self.gate = screened.to_json()
        else:
            self.gate = judge(reference, added, pairs.seed_gains, pairs.reused).to_json()
        return None

    def _second_pair_ran(self, first: GateRound, added: tuple[str, ...],
                         ending: Callable[[], Done]) -> None:
        """The program's second pair's run ended: its gate on both pairs, then its record."""
        search, folds = self.search, self.search.fold_plan
        result = self._results[SECOND_PAIR][0]
        kept = self._kept_sides or []
        if result.status != Status.OK.value:
            why = result.error or result.stderr_tail[-300:]
            self._gate_on_first_pair(first, added, ending,
                                     f"its second pair's run ended {result.status}: {why}")
            return
        pairs = gate_round(search.task, folds, search.dev_labels.iloc[folds.held_out],
                           result.gate_csv, kept[1:])
        if pairs.problem:
            self._gate_on_first_pair(first, added, ending, pairs.problem)
            return
        if len(kept) < 2:
            search.keep_reference_sides(reference_key(self.proposal),
                                        [*first.without, *pairs.without])
        self.gate = judge(self.proposal.idea, added, first.seed_gains + pairs.seed_gains,
                          first.reused and pairs.reused).to_json()
        ending()

    def _gate_on_first_pair(self, first: GateRound, added: tuple[str, ...],
                            ending: Callable[[], Done], why: str) -> Done:
        """The record of a program whose second pair gave no gains (`why`): not kept, its
        first pair's gains recorded."""
        gate = judge(self.proposal.idea, added, first.seed_gains, first.reused)
        self.gate = replace(gate, kept=False, reason=f"not kept: {why}").to_json()
        return ending()

    def lose(self, error: str) -> Done:
        """Lost to infrastructure (a dead or hung worker, a failed LLM call)."""
        if self._awaiting is not None and self._done is None:  # scored, its gate unfinished
            return self._gate_on_first_pair(*self._awaiting, f"its second pair was lost: {error}")
        return self._finish(Status.LOST, error=error)

    def kill(self, reason: str) -> Done:
        """Stopped before it finished (the deadline, Ctrl-C). A generation cut short held its
        actor until now: its seconds count, or a run's last LLM call (often 30 s or more) would
        vanish from the timeline and from the LLM's busy share."""
        if self._done is None and self._generating_since:
            self.llm_seconds += max(0.0, self._clock() - self._generating_since)
            self._generating_since = 0.0
        if self._awaiting is not None and self._done is None:  # scored, its gate unfinished
            return self._gate_on_first_pair(*self._awaiting,
                                            f"{reason} before its second pair ran")
        return self._finish(Status.KILLED, error=reason)

    # ---- the record ------------------------------------------------------------------------

    def _finish(self, status: Status, *, error: str = "", result: ExecResult | None = None,
                predictions: HeldOut | None = None, train_raw: float | None = None,
                executor: str = "", node_ip: str = "",
                measured: Measurements | None = None,
                fold_models: list[bytes] | None = None) -> Done:
        search = self.search
        if self._done is not None:  # a late answer of a step already over changes nothing
            return self._done
        if self.code:
            search.running.pop(code_hash(self.code), None)
        metric_raw = predictions.valid_raw if predictions is not None else None
        first_start = min((r[3] for r in self._results.values()), default=0.0)
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
            if result and self.operator.traits.scored else None,
            exec_seconds=sum(r[0].seconds for r in self._results.values()),
            llm_seconds=self.llm_seconds,
            queue_seconds=max(0.0, first_start - self.queued_at) if self.queued_at else 0.0,
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
            runs=json.dumps([[fold, r[1], round(r[3], 3), round(r[0].seconds, 3)]
                             for fold, r in sorted(self._results.items())]),
            params=params_json(model_part(self.code)) if self.code else "",
            feature_set=self.node_id if self.operator.traits.program and self.code
            else self.proposal.feature_set,
            gate=self.gate,
        )
        self._done = Done(node, predictions.test_raw if predictions else None, predictions,
                          fold_models)
        return self._done


def run_step(step: Step, generate: Callable[[ChatPrompt], Reply],
             execute: Callable[[str, int, Limits], ExecResult]) -> Done:
    """Drive a step to its end one call at a time (benchmarks that replay steps);
    `execute(code, fold, limits)` runs one fold's run."""
    while True:
        need = step.next()
        if isinstance(need, Done):
            return need
        if isinstance(need, Generate):
            step.on_reply(generate(need.prompt))
        elif isinstance(need, Execute):
            for fold in need.folds:
                step.on_started(fold, need.seconds)
                step.on_result(fold, execute(need.code, fold, Limits(wall_seconds=need.seconds)))
        else:
            raise RuntimeError(f"step {step.node_id} waits with nothing in flight")
