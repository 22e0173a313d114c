"""What the steps of one search start share (`SearchContext`): the task, the prompts'
context, the Journal, the folds, the code running, the scored nodes' predictions that
ensemble selection chooses among, and the latest references' gate sides. Pure: no Ray and
no I/O, like the step (engine/step.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from engine.evaluation.folds import Folds, all_folds_inputs, dev_labels, fold_inputs, make_folds
from engine.evaluation.scoring import HeldOut
from engine.task.prepare import PreparedTask
from operators.analyst import analysis_findings, next_analysis
from operators.context import TaskContext
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal

# Nodes whose predictions stay in memory: ensemble selection chooses among the 20 best.
KEPT_IN_MEMORY = 50
# References whose gate sides without a program stay in memory: the floor's best
# configuration moves on as its trials improve, and a program pairs with the newest.
REFERENCES_KEPT = 4
ALL_FOLDS = -1  # a run of engine-written code that fits every fold in one process

# A reference configuration on a feature set: (the set, "" the columns as they are; the
# family; its params as the proposal holds them).
ReferenceKey = tuple[str, str, tuple[tuple[str, Any], ...]]


@dataclass(frozen=True)
class Running:
    """Code queued or running: the node that will record it, its operator and parent (what a
    reply written meanwhile on the same parent is compared with) and the code itself."""

    node_id: str
    operator: Operator
    parent_id: str | None
    code: str


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
    # Seconds one run of the floor's own code may take (a slow trial must not hold the
    # executor for a large part of a short budget); None: exec_timeout.
    floor_seconds: float | None = None
    reflect: bool = False  # --reflect: a reflection call before every debug and improve step
    # A reply repeating code already in the Journal or running is not run again (seed 002);
    # a replay benchmark, measuring each sample as it runs, turns this off.
    skip_duplicates: bool = True
    running: dict[str, Running] = field(default_factory=dict)  # code hash -> what runs it
    requests: int = 0  # first prompts built so far: part of each one's sampling seed
    folds: Folds | None = None  # the run's folds (engine/evaluation/folds.py); None: the holdout
    # What every scored node predicted (held-out and test): ensemble selection's material.
    predictions: dict[str, HeldOut] = field(default_factory=dict)
    # The gate's fresh pairs' sides without the program (held-out predictions, seed by seed)
    # of the latest references: they depend on the reference configuration, its feature set
    # and the seed alone, so a later program on the same ones fits only its own sides.
    reference_sides: dict[ReferenceKey, list[pd.DataFrame]] = field(default_factory=dict)
    input_files: dict[int, dict[str, bytes]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.folds is None:
            self.folds = make_folds(self.task, 1)
        self.dev_labels = dev_labels(self.task)

    @property
    def fold_plan(self) -> Folds:
        assert self.folds is not None  # set in __post_init__
        return self.folds

    def keep(self, node: Node, predictions: HeldOut) -> None:
        """Hold a scored node's predictions for ensemble selection; only the best
        KEPT_IN_MEMORY (on large data a long run's would fill the driver's memory; all stay
        on disk in preds/)."""
        self.predictions[node.node_id] = predictions
        if len(self.predictions) > KEPT_IN_MEMORY:
            journal = self.journal
            score = {i: journal.get(i).metric if i in journal else None
                     for i in self.predictions}
            score[node.node_id] = node.metric
            del self.predictions[min(self.predictions, key=lambda i: _or_worst(score[i]))]

    def keep_reference_sides(self, key: ReferenceKey, sides: list[pd.DataFrame]) -> None:
        """Keep a reference's gate sides without the program, the latest REFERENCES_KEPT."""
        self.reference_sides.pop(key, None)
        self.reference_sides[key] = sides
        while len(self.reference_sides) > REFERENCES_KEPT:
            del self.reference_sides[next(iter(self.reference_sides))]

    def inputs(self, fold: int) -> dict[str, bytes]:
        """The input/ folder of a run of `fold` (ALL_FOLDS: engine-written code only), made
        once a run: on large data writing the rows as CSV takes the driver seconds."""
        if fold not in self.input_files:
            self.input_files[fold] = (all_folds_inputs(self.task, self.fold_plan)
                                      if fold == ALL_FOLDS
                                      else fold_inputs(self.task, self.fold_plan, fold))
        return dict(self.input_files[fold])

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


def reference_key(proposal: Proposal) -> ReferenceKey:
    """The reference configuration and feature set a feature program's proposal pairs with."""
    return proposal.parent_id or "", proposal.family, proposal.params


def _or_worst(metric: float | None) -> float:
    return -math.inf if metric is None else metric
