"""The rows the answer of a search on a sample learns from once chosen, and what they are worth.

Such a search scored every node learning from the same sample; the answer is then refitted on
as many train + valid rows as the time left affords (`refit_rows`). An ensemble of many
members affords fewer rows than its best member alone, and more rows can be worth more than
the ensemble: on the million-row table the 7-member answer refitted on 94,567 rows scored
test AUC 0.8421, its best member alone 0.8411 on as many and 0.8463 on all 800,000
(benchmarks/results/big-data-2026-12-08). So an ensemble whose refit is held to part of the
rows is weighed against its members by a learning curve measured there and then
(`weigh_rows`): its best member is fitted once more on half its sample and scored on the same
held-out rows, and what that doubling of the rows gained (`slope`) prices each candidate's
refit rows, each further doubling worth half the one before (`estimate`). The answer is the
candidate with the best valid score plus that price.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from engine.evaluation.closing import save_share, scoring_seconds
from engine.evaluation.folds import (
    HOLDOUT,
    OUTSIDE,
    Folds,
    fold_inputs,
    search_test_rows,
)
from engine.evaluation.scoring import SubmissionError, read_submission, submission_metric
from engine.evaluation.select import Runner
from engine.task.prepare import PreparedTask
from operators.kinds.ensemble import member_weights, weighted_members
from search.journal import Journal, best_of
from search.node import Node

HALF_SEED = 7_919  # which half of the sample the learning curve's fit learns from


def refit_rows(task: PreparedTask, journal: Journal, node: Node, folds: Folds | None,
               seconds_left: float | None) -> int | None:
    """How many train + valid rows the answer of a search on a sample is refitted on: as many
    as `seconds_left` affords (at least the sample's), taking `save_share` times its scoring
    runs, whose fits grow with the rows and the rest (start, reading, predicting) does not,
    and predicting the test rows the search left out; None (every row) when the search used
    them all or they fit."""
    if seconds_left is None or folds is None or not folds.sampled:
        return None
    learned, dev = len(folds.learn_rows(0)), len(folds.fold_of)
    # an ensemble's members, else the node itself
    fits = [journal.get(i) for i in member_weights(node) if i in journal]
    fitting = sum(n.train_seconds or 0.0 for n in fits)
    # The refit predicts every test row; its scoring runs, the search's sample of them.
    untested = len(task.test_X) - len(search_test_rows(folds, len(task.test_X)))
    predicting = untested / 1000 * sum(n.predict_ms_per_row or 0.0 for n in fits)
    spare = (seconds_left / save_share(node, folds.k == HOLDOUT) - scoring_seconds(journal, node)
             - predicting)
    if fitting <= 0:
        return None
    rows = learned + int(max(0.0, spare) / fitting * learned)
    return None if rows >= dev else rows


def half_sample(folds: Folds) -> Folds:
    """`folds` learning from a seeded half of its learn rows (the rest OUTSIDE), predicting the
    same held-out rows."""
    learn = folds.learn_rows(0)
    fold_of = folds.fold_of.copy()
    fold_of[np.random.default_rng(HALF_SEED).permutation(learn)[:len(learn) // 2]] = OUTSIDE
    return replace(folds, fold_of=fold_of)


def estimate(metric: float, rows: int, learned: int, slope: float) -> float:
    """A node's valid score learning from `learned` rows, carried to `rows`: `slope` is what
    the doubling up to `learned` gained, and each doubling after gains half the one before (an
    excess error falling as 1/rows; the million-row table's curve fell about so: 0.006, 0.0023
    and 0.001 a doubling at 19k, 94k to 300k and 300k to 800k rows), so the most any number of
    rows adds is `slope`."""
    doublings = max(0.0, math.log2(max(rows, 1) / max(learned, 1)))
    return metric + slope * (1.0 - 2.0 ** -doublings)


@dataclass(frozen=True)
class RowsWeighed:
    """An ensemble answer held to part of the rows, weighed against its members: the learning
    curve's `slope` (normalised score a doubling of the rows, from `top` on half the sample:
    `half`), each candidate's (node, refit rows, estimate), the one chosen, and the seconds the
    curve's run took."""

    top: str
    half: float
    slope: float
    candidates: tuple[tuple[str, int, float], ...]
    chosen: str
    seconds: float

    def text(self, answer: str) -> str:
        """Why the answer is `chosen`, for the summary."""
        rows = dict((node, n) for node, n, _ in self.candidates)
        if self.chosen == answer:
            return (f"its refit on {rows[answer]} rows is worth more than its members' on more "
                    f"(the last doubling of the rows gained {self.slope:+.4g}: {self.top} on "
                    "half the sample)")
        return (f"ensemble {answer} refitted on {rows[answer]} rows gives way to its member "
                f"{self.chosen} refitted on {rows[self.chosen]}: the last doubling of the rows "
                f"gained {self.slope:+.4g} ({self.top} on half the sample), and more rows add "
                "more than the ensemble")


def weigh_rows(task: PreparedTask, searched: PreparedTask, journal: Journal, folds: Folds,
               answer: Node, seconds_left: float, run: Runner, limits: Any,
               truth: pd.Series) -> RowsWeighed | None:
    """`answer` (an ensemble whose refit the time left holds to part of the rows) against its
    members, each refitted on the rows it affords, priced by the learning curve of its best
    member (see the module docstring; `searched`: the search's task, `truth`: the held-out
    rows' labels). None when there is nothing to weigh: every row fits, no member affords more
    rows, or the curve's run failed."""
    if not folds.sampled or not answer.operator.traits.combines:
        return None
    dev, learned = len(folds.fold_of), len(folds.learn_rows(0))
    own = refit_rows(task, journal, answer, folds, seconds_left)
    members = [journal.get(i) for i in weighted_members(answer) if i in journal]
    members = [m for m in members if m.metric is not None]
    top = best_of(members)
    if own is None or top is None:
        return None
    rows = {m.node_id: refit_rows(task, journal, m, folds, seconds_left) or dev for m in members}
    if max(rows.values()) <= own:
        return None
    result = run(top.code, fold_inputs(searched, half_sample(folds), 0), limits)
    try:
        if result.status != "ok":
            raise SubmissionError(result.error)
        half = searched.metric.normalise(submission_metric(
            searched, read_submission(searched, result.valid_csv, "valid", len(truth)),
            truth.reset_index(drop=True)))
    except SubmissionError:
        return None
    slope = max(0.0, (top.metric or 0.0) - half)
    candidates = ((answer.node_id, own, estimate(answer.metric or 0.0, own, learned, slope)),
                  *((m.node_id, rows[m.node_id],
                     estimate(m.metric or 0.0, rows[m.node_id], learned, slope))
                    for m in members))
    return RowsWeighed(top.node_id, half, slope, candidates,
                       max(candidates, key=lambda c: c[2])[0], result.seconds)

