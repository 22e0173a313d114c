"""A feature program's gate on the held-out rows: the reference configuration with the program
against the same configuration without it, group by group.

Both sides are fitted afresh in the program's own run (operators/models.py `gate_part`): for
each of a few new seeds, the configuration with and without the program on every fold, so
the two differ only by the program. The reference's own stored predictions are not the other
side: the reference is the best of the floor's trials, and part of why it is best is its
seed's luck, which no other fit shares. The groups are the run's folds (on the holdout, fixed
random groups of the valid rows), each group's gain is the mean over the seeds, and
`search.programs.keep_rule` decides.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from engine.evaluation.folds import Folds
from engine.evaluation.scoring import SubmissionError, read_stacked, submission_metric
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


def fresh_pairs(task: PreparedTask, gate_csv: bytes,
                rows: int) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """The (with, without) held-out predictions of each seed in submission/gate.csv (block
    2 i with the program, 2 i + 1 without)."""
    try:
        blocks = pd.read_csv(io.BytesIO(gate_csv), usecols=["fold"])["fold"].nunique()
    except (ValueError, pd.errors.ParserError) as exc:
        raise SubmissionError(f"submission/gate.csv is unreadable: {exc}") from exc
    if blocks < 2 or blocks % 2:
        raise SubmissionError(f"submission/gate.csv holds {blocks} blocks; expected pairs")
    frames = read_stacked(task, gate_csv, "valid", rows, blocks)
    return [(frames[i], frames[i + 1]) for i in range(0, blocks, 2)]


def program_gate(task: PreparedTask, folds: Folds, truth: pd.Series, reference: str,
                 added: tuple[str, ...], gate_csv: bytes | None) -> Gate:
    """The gate of a program whose run wrote `gate_csv` (its fresh pairs; `truth`: the
    held-out rows' labels)."""
    if gate_csv is None:
        return Gate(reference, (), False, "not kept: its run wrote no fresh pairs", added)
    try:
        pairs = fresh_pairs(task, gate_csv, len(truth))
    except SubmissionError as exc:
        return Gate(reference, (), False, f"not kept: {exc}", added)
    per_seed = np.array([group_gains(task, truth, w, wo, folds.groups()) for w, wo in pairs])
    gains = per_seed.mean(axis=0).tolist()
    kept, reason = keep_rule(gains)
    return Gate(reference, tuple(gains), kept, reason, added, len(pairs))
