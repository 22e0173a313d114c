"""One node's life, top to bottom: a pure state machine from a proposal to a finished Node.

A `Step` says what it needs next, an LLM reply (`Generate`), a sandboxed run (`Execute`) or
nothing more (`Done`, holding the node), and takes the answers back through `on_reply` and
`on_result`. It holds no Ray and does no I/O: the loop (`engine/loop.py`) only schedules what
steps ask for onto the LLM and executor pools, and a test or study can drive the same class one
call at a time.

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

from common.chat import ChatPrompt, Reply
from engine.evaluation.blend import ensemble_selection
from engine.evaluation.program_gate import ProgramGate
from engine.evaluation.scoring import HeldOut
from engine.search_context import ALL_FOLDS, Running, SearchContext, reference_key
from engine.step_work import SECOND_PAIR, Calls, Outcome, Ran, Runs
from operators.features import added_columns
from operators.flags import implementation_flags
from operators.harness import model_part
from operators.kinds import kind_of, repair_prompt
from operators.kinds.ensemble import ensemble_cost, ensemble_written
from operators.params import params_json
from operators.replies import clean_reflection, self_reported_metric
from sandbox import ExecResult
from search.node import Node, Operator, Status, code_hash
from search.policy import Proposal

DEADLINE_ERROR = "stopped at the budget deadline"
STOPPED_ERROR = "stopped by the user"
ENGINE_WRITTEN = tuple(op for op in Operator if op.traits.engine_written)


@dataclass(frozen=True, slots=True)
class Generate:
    """The step needs the reply to `prompt`."""

    prompt: ChatPrompt


@dataclass(frozen=True, slots=True)
class Execute:
    """The step needs `code` run in the sandbox once per fold of `folds` (each its own run,
    on that fold's inputs; ALL_FOLDS: one run on the all-folds inputs), each for at most
    `seconds`; `warm`: the engine wrote every line of it but kept feature programs, so it may
    run in an executor's warm session (sandbox.WarmRunner)."""

    code: str
    seconds: float
    folds: tuple[int, ...]
    warm: bool = False


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
    runs each fold in its own sandbox, whose held-out rows carry no labels, fold 0 first: a
    script that fails there fails fast, and only a script that ran is given the other folds
    (in parallel). A feature program's gate is its `ProgramGate`
    (engine/evaluation/program_gate.py); what its calls and runs gave, engine/step_work.py.
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
        self.reply = ""  # raw text of the reply that gave the code
        self.calls = Calls()  # its LLM calls (engine/step_work.py)
        self.repaired = False
        self.duplicate = False
        self.program: ProgramGate | None = None  # a feature program's gate against its reference
        # While a program's second pair runs: its gate, and its record to make once that ran.
        self._awaiting: tuple[ProgramGate, Callable[[], Done]] | None = None
        self.runs = Runs(clock)  # its sandbox runs (engine/step_work.py)
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
    def warm(self) -> bool:
        """A configuration of a model family the engine wrote (baseline, portfolio entry,
        Optuna trial), whose runs may be warm: not a new feature program, not a case's or an
        LLM's model code."""
        traits = self.operator.traits
        return traits.engine_written and traits.configured and bool(self.proposal.family)

    @property
    def exec_cap(self) -> float:
        """Seconds one run may take (the operator's kind says, from the search's caps)."""
        return self.kind.seconds(self.search.exec_timeout, self.search.floor_seconds)

    def next(self) -> Need:
        """What the step needs now; each request is handed out once (None until an answer
        arrives), Done for good once it is over."""
        if self._done is not None:
            return self._done
        if self.runs.wanted:
            return Execute(self.runs.code, self.exec_cap, self.runs.hand_out(), self.warm)
        if self.runs.queued_at or self._asked:
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
            self._finish(Outcome(Status.BUGGY, "no kept predictions of the candidates"))
            return
        members = [search.journal.get(i) for i in weights]
        written = ensemble_written(search.ctx, members, weights, len(kept))
        self.plan, self.code = written.plan, written.code
        self._finish(Outcome(Status.OK, predictions=predictions, measured=ensemble_cost(members)))

    def _queue(self, run_code: str, folds: tuple[int, ...]) -> None:
        self.runs.queue(run_code, folds)
        self.search.running[code_hash(self.code)] = Running(
            self.node_id, self.operator, self.proposal.parent_id, self.code)

    # ---- answers ---------------------------------------------------------------------------

    def generating(self, actor: str) -> None:
        """The scheduler handed the request to `actor`, which works on it from now."""
        self.calls.actor, self.calls.since = actor, self._clock()

    def on_reply(self, reply: Reply) -> None:
        self._asked = False
        self.calls.answered(reply)
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
            self._finish(Outcome(Status.BUGGY, parsed.problem))
            return
        written = self.kind.assembled(self.code, self.search.ctx, self.proposal,
                                      self.search.journal)
        self.code = written.code
        if not self.kind.executes:  # the reply is the result (ideas): nothing runs
            self._finish(Outcome(Status.OK))
            return
        search = self.search
        digest = code_hash(self.code)
        running = search.running.get(digest)
        twin = search.journal.find_code(digest) or (running.node_id if running else None)
        if twin is not None and search.skip_duplicates:
            self.duplicate = True
            self.code = ""  # not run, so nothing to debug: the twin holds the code
            self._finish(Outcome(Status.BUGGY,
                                 f"duplicate of node {twin}: identical code, not run again"))
            return
        siblings = self._siblings()
        repeated = (self.kind.repeats(self.code, siblings)
                    if siblings and search.skip_duplicates else "")
        if repeated:
            self.code = parsed.code  # as a refusal on its text records it
            self._finish(Outcome(Status.BUGGY, repeated))
            return
        if written.with_program_code:
            key, folds = reference_key(self.proposal), search.fold_plan
            self.program = ProgramGate(
                search.task, folds, search.dev_labels.iloc[folds.held_out], self.proposal.idea,
                search.reference_sides.get(key), written.second_pair,
                partial(search.keep_reference_sides, key), written.gate_splits)
        if self.program is not None and self.program.kept:
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
        self.runs.started(fold, limit)

    def on_result(self, fold: int, result: ExecResult, *, executor: str = "",
                  node_ip: str = "") -> None:
        """A run of `fold` ended. Once fold 0 ran, the others are wanted; once every fold
        ran, the node is scored in the driver, against labels that never left it."""
        started, limit = self.runs.end(fold)
        if result.status == Status.TIMEOUT.value and limit < self.exec_cap:
            result = replace(result, status=Status.KILLED.value, error=DEADLINE_ERROR)
        key = SECOND_PAIR if self._awaiting else fold
        self.runs.ended[key] = Ran(result, executor, node_ip, started)
        folds = self.search.fold_plan.k
        if (fold == 0 and result.status == Status.OK.value and folds > 1
                and self.operator.traits.scored):
            self.runs.wanted = tuple(range(1, folds))
            return
        if self.runs.settled:
            self._conclude()

    def _conclude(self) -> None:
        """Every run wanted has ended: the node's status, measurements and scores."""
        if self._awaiting is not None:  # a program's second pair ran
            program, ending = self._awaiting
            program.second_pair_ran(self.runs.ended[SECOND_PAIR].result)
            ending()
            return
        search = self.search
        outcome = self.runs.outcome(search.task, search.fold_plan, search.dev_labels,
                                    scored=self.operator.traits.scored,
                                    printed_failure=self.kind.printed_failure)
        ending = partial(self._finish, outcome)
        if self.program is not None and outcome.predictions is not None:
            run = self.runs.ended.get(ALL_FOLDS)
            second = self.program.first_pair(run.result.gate_csv if run else None,
                                             added_columns(outcome.stdout))
            if second:
                self.runs.code, self.runs.wanted = second, (ALL_FOLDS,)
                self._awaiting = self.program, ending
                return
        ending()

    def lose(self, error: str) -> Done:
        """Lost to infrastructure (a dead or hung worker, a failed LLM call)."""
        if self._awaiting is not None and self._done is None:  # scored, its gate unfinished
            self._awaiting[0].first_pair_only(f"its second pair was lost: {error}")
            return self._awaiting[1]()
        return self._finish(Outcome(Status.LOST, error))

    def kill(self, reason: str) -> Done:
        """Stopped before it finished (the deadline, Ctrl-C); a generation cut short counts."""
        if self._done is None:
            self.calls.cut(self._clock())
        if self._awaiting is not None and self._done is None:  # scored, its gate unfinished
            self._awaiting[0].first_pair_only(f"{reason} before its second pair ran")
            return self._awaiting[1]()
        return self._finish(Outcome(Status.KILLED, reason))

    # ---- the record ------------------------------------------------------------------------

    def _finish(self, outcome: Outcome) -> Done:
        search = self.search
        if self._done is not None:  # a late answer of a step already over changes nothing
            return self._done
        if self.code:
            search.running.pop(code_hash(self.code), None)
        predictions = outcome.predictions
        metric_raw = predictions.valid_raw if predictions is not None else None
        node = Node(
            node_id=self.node_id,
            parent_id=self.proposal.parent_id,
            operator=self.operator,
            step=len(search.journal),
            depth=0 if self.parent is None else self.parent.depth + 1,
            run_id=search.run_id,
            policy=search.policy,
            plan=self.plan,
            hint=self.proposal.hint,
            code=self.code,
            code_hash=code_hash(self.code) if self.code else "",
            metric=None if metric_raw is None else search.task.metric.normalise(metric_raw),
            metric_raw=metric_raw,
            self_reported=self_reported_metric(outcome.stdout)
            if outcome.result and self.operator.traits.scored else None,
            temperature=self.proposal.temperature,
            created_at=self.created_at,
            finished_at=self._clock(),
            **outcome.node_fields(), **self.calls.node_fields(), **self.runs.node_fields(),
            flags=",".join(implementation_flags(search.task.metric, self.code, metric_raw,
                                                outcome.train_raw)),
            reflection=self.reflection,
            prompt=json.dumps(self.prompt.messages) if self.reply and self.prompt else "",
            reply=self.reply,
            params=params_json(model_part(self.code)) if self.code else "",
            feature_set=self.node_id if self.operator.traits.program and self.code
            else self.proposal.feature_set,
            gate=self.program.gate if self.program is not None else "",
            gate_seconds=self.runs.gate_seconds(outcome.measured),
        )
        self._done = Done(node, predictions.test_raw if predictions else None, predictions,
                          outcome.fold_models)
        return self._done

