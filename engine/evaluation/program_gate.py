"""A feature program's gate on the held-out rows: its node's predictions against its
reference's (the same configuration without the program), group by group.

The reference's predictions are the ones kept when it was scored: the same model, seed and
rows, so the only difference is the program. The groups are the run's folds (on the holdout,
fixed random groups of the valid rows), and `search.programs.keep_rule` decides.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.evaluation.folds import Folds
from engine.evaluation.scoring import HeldOut, submission_metric
from engine.task.prepare import PreparedTask
from search.programs import Gate, keep_rule


def group_gains(task: PreparedTask, truth: pd.Series, with_program: pd.DataFrame,
                without: pd.DataFrame, groups: np.ndarray) -> list[float]:
    """Normalised metric with minus without, per group (rows in `held_out` order)."""
    truth = truth.reset_index(drop=True)
    gains = []
    for group in np.unique(groups):
        rows = np.flatnonzero(groups == group)
        scores = [task.metric.normalise(submission_metric(
            task, frame.iloc[rows].reset_index(drop=True), truth.iloc[rows]))
            for frame in (with_program, without)]
        gains.append(scores[0] - scores[1])
    return gains


def program_gate(task: PreparedTask, folds: Folds, truth: pd.Series, reference: str,
                 with_program: HeldOut, without: HeldOut | None,
                 added: tuple[str, ...]) -> Gate:
    """The gate of a program whose node predicted `with_program`; `without` is the reference's
    kept predictions (None when they are no longer kept: then it cannot be compared)."""
    if without is None:
        return Gate(reference, (), False, "not kept: the reference's predictions are gone",
                    added)
    gains = group_gains(task, truth, with_program.valid, without.valid, folds.groups())
    kept, reason = keep_rule(gains)
    return Gate(reference, tuple(round(g, 6) for g in gains), kept, reason, added)
