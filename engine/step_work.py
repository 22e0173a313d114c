"""The work a step (engine/step.py) asked for and what it gave: its LLM calls (`Calls`), its
sandbox runs (`Runs`: the folds wanted and handed out, each run's start, limit and result),
and their outcome for the node (`Outcome`: status, error, scores on the hidden labels). Pure,
like the step."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import pandas as pd

from common.chat import Reply
from engine.evaluation.folds import Folds
from engine.evaluation.scoring import (
    HeldOut,
    SubmissionError,
    read_stacked,
    read_submission,
    score_held_out,
    score_train,
)
from engine.search_context import ALL_FOLDS
from engine.task.prepare import PreparedTask
from operators.fitted import fold_states
from operators.measure import Measurements, split_measurements
from sandbox import ExecResult
from search.node import Status
from search.programs import REJECTED


@dataclass
class Calls:
    """A step's LLM calls: the model and actor of the latest, their seconds and tokens."""

    model: str = ""
    actor: str = ""  # the LLM actor serving its latest request
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    since: float = 0.0  # when an actor took the request awaiting its reply; 0.0: none waits

    def answered(self, reply: Reply) -> None:
        self.since = 0.0
        self.model = reply.model
        self.seconds += reply.seconds
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens

    def cut(self, now: float) -> None:
        """A generation cut short held its actor until `now`: its seconds count, or a run's
        last LLM call (often 30 s or more) would vanish from the timeline and the LLM's busy
        share."""
        if self.since:
            self.seconds += max(0.0, now - self.since)
            self.since = 0.0

    def node_fields(self) -> dict[str, Any]:
        return {"model": self.model, "llm_actor": self.actor, "llm_seconds": self.seconds,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


@dataclass(frozen=True)
class Outcome:
    """What a step's runs gave its node; a step lost or stopped has its status and error
    alone. `result` is the run that speaks for the node, its stdout without the harness's
    measurements (`measured`); `fold_models` those its all-folds run kept."""

    status: Status
    error: str = ""
    result: ExecResult | None = None
    executor: str = ""
    node_ip: str = ""
    measured: Measurements = field(default_factory=Measurements)
    predictions: HeldOut | None = None
    train_raw: float | None = None
    fold_models: list[bytes] | None = None

    @property
    def stdout(self) -> str:
        return self.result.stdout_tail if self.result else ""

    def node_fields(self) -> dict[str, Any]:
        result = self.result
        return {"status": self.status, "error": self.error,
                "exit_code": result.exit_code if result else None, "stdout_tail": self.stdout,
                "stderr_tail": result.stderr_tail if result else "",
                "executor": self.executor, "node_ip": self.node_ip,
                "train_metric_raw": self.train_raw, **self.measured.node_fields()}


class Ran(NamedTuple):
    """One ended run: its result, the executor and node that ran it, when it started."""

    result: ExecResult
    executor: str
    node_ip: str
    started: float


# Where a feature program's second-pair run (an all-folds run) is among the step's results.
SECOND_PAIR = -2


class Runs:
    """The runs of one step: `code` is what the sandbox runs (the node's code, or its
    all-folds form); `ended` maps a fold (ALL_FOLDS: the all-folds run; a program's second
    pair: its own key) to its run."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.code = ""
        self.queued_at = 0.0
        self.wanted: tuple[int, ...] = ()  # folds wanted and not handed out yet
        self.handed_out: set[int] = set()  # folds handed out whose run has not ended
        self.running: dict[int, tuple[float, float]] = {}  # fold -> (started at, limit)
        self.ended: dict[int, Ran] = {}

    @property
    def settled(self) -> bool:
        """Every run wanted has ended."""
        return not self.handed_out and not self.wanted

    def queue(self, code: str, folds: tuple[int, ...]) -> None:
        self.code, self.queued_at, self.wanted = code, self._clock(), folds

    def hand_out(self) -> tuple[int, ...]:
        folds, self.wanted = self.wanted, ()
        self.handed_out.update(folds)
        return folds

    def started(self, fold: int, limit: float) -> None:
        self.running[fold] = (self._clock(), limit)

    def end(self, fold: int) -> tuple[float, float]:
        """The run of `fold` ended: when it started, and its limit."""
        self.handed_out.discard(fold)
        return self.running.pop(fold)

    def first(self) -> Ran:
        """The run that speaks for the node: the first that failed, else the first."""
        runs = sorted(self.ended)
        failed = [f for f in runs if self.ended[f].result.status != Status.OK.value]
        return self.ended[failed[0] if failed else runs[0]]

    def outcome(self, task: PreparedTask, folds: Folds, labels: pd.Series, *, scored: bool,
                printed_failure: Callable[[str], str]) -> Outcome:
        """Every run wanted has ended: the node's status and measurements, and for an
        operator whose node is `scored` its scores on the hidden dev `labels`; for any other,
        what it printed is its result (`printed_failure`: what there says it failed)."""
        first = self.first()
        measured, stdout = split_measurements(first.result.stdout_tail)
        result = replace(first.result, stdout_tail=stdout)
        error = result.error
        if REJECTED in error:  # a feature program's checks on the rows refused it: the
            # reason alone, not where in the engine's check it was raised
            error = error[error.index(REJECTED):].split(" (line ")[0]
        ran = Outcome(Status(result.status), error, result, first.executor, first.node_ip,
                      measured)
        if not scored:
            failure = printed_failure(stdout)
            return replace(ran, status=Status.BUGGY, error=failure) \
                if ran.status is Status.OK and failure else ran
        if ran.status is not Status.OK:
            return ran
        try:
            predictions, train_raw = self.score(task, folds, labels)
        except SubmissionError as exc:
            return replace(ran, status=Status.BUGGY, error=str(exc))
        return replace(ran, predictions=predictions, train_raw=train_raw,
                       fold_models=self.fold_models(folds.k))

    def score(self, task: PreparedTask, folds: Folds, labels: pd.Series
              ) -> tuple[HeldOut, float | None]:
        """The held-out and test predictions scored on the hidden dev `labels`, and the train
        score of the first run; SubmissionError for a submission that cannot be scored."""
        held = folds.held_out
        if ALL_FOLDS in self.ended:
            result = self.ended[ALL_FOLDS].result
            valid = [read_submission(task, result.valid_csv, "valid", len(held))]
            tests = read_stacked(task, result.test_csv, "test", len(task.test_X), folds.k)
            rows = [held]
        else:
            valid, tests, rows = [], [], []
            for fold in range(folds.k):
                result = self.ended[fold].result
                part = folds.rows(fold)
                valid.append(read_submission(task, result.valid_csv, "valid", len(part)))
                tests.append(read_submission(task, result.test_csv, "test"))
                rows.append(part)
        predictions = score_held_out(task, labels.iloc[held], valid, rows, tests)
        learn = folds.learn_rows(max(min(self.ended), 0))
        return predictions, score_train(task, self.first().result.train_csv, labels.iloc[learn])

    def fold_models(self, k: int) -> list[bytes] | None:
        """The `k` fold models the all-folds run kept; None when it kept none."""
        if ALL_FOLDS not in self.ended:
            return None
        kept = fold_states(self.ended[ALL_FOLDS].result.fitted)
        return kept if kept is not None and len(kept) == k else None

    def gate_seconds(self, measured: Measurements) -> float | None:
        """The seconds its runs spent fitting a feature program's gate: those its scoring run
        measured, and its second pair's whole run; None for a node without a gate."""
        second = self.ended.get(SECOND_PAIR)
        if measured.gate_seconds is None and second is None:
            return None
        return (measured.gate_seconds or 0.0) + (second.result.seconds if second else 0.0)

    def node_fields(self) -> dict[str, Any]:
        """The Node's fields about its runs."""
        first_start = min((r.started for r in self.ended.values()), default=0.0)
        return {
            "exec_seconds": sum(r.result.seconds for r in self.ended.values()),
            "queue_seconds": max(0.0, first_start - self.queued_at) if self.queued_at else 0.0,
            "runs": json.dumps([[fold, r.executor, round(r.started, 3), round(r.result.seconds, 3)]
                                for fold, r in sorted(self.ended.items())]),
        }
