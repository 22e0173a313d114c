"""Ensemble selection over the nodes' held-out predictions (Caruana et al. 2004, the weighted
ensemble AutoGluon fits on its bagged models' out-of-fold predictions).

Greedy forward selection with replacement: start empty; `SIZE` times add the candidate whose
addition scores best on the held-out rows (normalised metric; a tie goes to the candidate
scoring best alone); the weights are how often each was added, taken at the round that scored
best. The predictions are combined as `engine.evaluation.scoring.combine_predictions` combines fold
models: numbers and probabilities averaged, labels by weighted vote. Pure arithmetic on kept
predictions in the driver: nothing runs, and the test predictions are combined with the same
weights, so the test score is the blend's own.

The weights are fitted on the same held-out rows that score them, so a blend's score is
optimistic; the final selection's bootstrap guard (engine/evaluation/select.py) applies to it
like to any node, and when the answer is a blend the summary also gives its cross-fitted score
(`cross_fitted`): each group of rows (a fold) blended with weights selected on the other
groups' rows, so no row scores weights it helped choose.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from common.metric import label_strs
from engine.evaluation.scoring import (
    HeldOut,
    combine_predictions,
    label_matrix,
    labels_from_matrix,
    submission_metric,
)
from engine.task.prepare import PreparedTask
from search.node import PROBA_PREFIX

SIZE = 25  # rounds of selection: weights in steps of 1/25 at the finest


def prediction_matrix(task: PreparedTask, frame: pd.DataFrame) -> np.ndarray:
    """What is averaged: the number, the probability columns, or one-hot labels."""
    if task.task_type == "regression":
        return frame[["prediction"]].to_numpy(dtype=float)
    columns = [c for c in frame.columns if c.startswith(PROBA_PREFIX)]
    if columns:
        return frame[columns].to_numpy(dtype=float)
    return label_matrix(task, frame["prediction"])


def _score(task: PreparedTask, frame: pd.DataFrame, truth: pd.Series) -> float:
    return task.metric.normalise(submission_metric(task, frame, truth))


def blend_scorer(task: PreparedTask, like: pd.DataFrame,
                 truth: pd.Series) -> Callable[[np.ndarray], float]:
    """The normalised score on `truth` of a blended matrix (`prediction_matrix`'s form): the
    score of the blend those weights make (`blend`), with the labels read once instead of a
    frame built and read at every candidate of every round, and through the metric's
    resampled form (every row drawn once), which skips a library scorer's checks (sklearn's
    ROC AUC took 20 of a binary closing's 60 s)."""
    spec, labels = task.metric, task.labels
    everyone = np.ones((1, len(truth)))

    def raw(truth_values: np.ndarray, predicted: np.ndarray, proba: pd.DataFrame | None) -> float:
        return float(spec.resampled(truth_values, predicted, proba, labels, everyone)[0])

    if task.task_type == "regression":
        numbers = truth.to_numpy(dtype=float)
        return lambda matrix: spec.normalise(raw(numbers, matrix[:, 0], None))
    classes = label_strs(truth)
    columns = [c for c in like.columns if c.startswith(PROBA_PREFIX)]
    names = [c.removeprefix(PROBA_PREFIX) for c in columns]

    def score(matrix: np.ndarray) -> float:
        if columns:
            predicted = labels_from_matrix(task, matrix, names)
            proba = pd.DataFrame(matrix, columns=names) if spec.needs_proba else None
        else:
            predicted = np.asarray(labels, dtype=object)[matrix.argmax(axis=1)]
            proba = None
        return spec.normalise(raw(classes, predicted, proba))

    return score


def select_weights(task: PreparedTask, candidates: Mapping[str, pd.DataFrame],
                   truth: pd.Series, size: int = SIZE,
                   costs: Mapping[str, float] | None = None,
                   budget: float = float("inf")) -> dict[str, int]:
    """How often each candidate (node id -> checked held-out predictions) is picked; only
    the picked ones appear. Empty without candidates. With `costs`, a round picks only a
    candidate that keeps the picked ones' summed cost within `budget` (a member is paid
    for once, however often picked)."""
    truth = truth.reset_index(drop=True)
    ids = [i for i in candidates if costs is None or costs[i] <= budget]
    if not ids:
        return {}
    like = candidates[ids[0]]
    matrices = {i: prediction_matrix(task, candidates[i]) for i in ids}
    alone = {i: _score(task, candidates[i], truth) for i in ids}
    ids.sort(key=lambda i: -alone[i])  # ties go to the better single model
    blended = blend_scorer(task, like, truth)
    total = np.zeros_like(matrices[ids[0]])
    picks: list[str] = []
    best_score, best_round = -np.inf, 0
    for round_ in range(1, size + 1):
        spent = sum(costs[i] for i in set(picks)) if costs is not None else 0.0
        scored = [(blended((total + matrices[i]) / round_), i) for i in ids
                  if costs is None or i in picks or spent + costs[i] <= budget]
        score, choice = max(scored, key=lambda pair: (pair[0], -ids.index(pair[1])))
        total = total + matrices[choice]
        picks.append(choice)
        if score > best_score + 1e-12:
            best_score, best_round = score, round_
    return dict(Counter(picks[:best_round]))


def blend(task: PreparedTask, frames: Mapping[str, pd.DataFrame],
          weights: Mapping[str, int]) -> pd.DataFrame:
    """The weighted combination of the predictions of the nodes in `weights`."""
    ids = list(weights)
    return combine_predictions(task, [frames[i] for i in ids], [weights[i] for i in ids])



def ensemble_selection(task: PreparedTask, kept: Mapping[str, HeldOut], truth: pd.Series,
                       costs: Mapping[str, float] | None = None,
                       budget: float = float("inf")) -> tuple[dict[str, int], HeldOut | None]:
    """The weights ensemble selection gives the kept nodes' held-out predictions (best weight
    first; within `budget` by `costs`, see `select_weights`), and the blend's predictions with
    their scores; ({}, None) with nothing kept."""
    weights = select_weights(task, {i: p.valid for i, p in kept.items()}, truth,
                             costs=costs, budget=budget)
    if not weights:
        return {}, None
    valid = blend(task, {i: kept[i].valid for i in weights}, weights)
    test = blend(task, {i: kept[i].test for i in weights}, weights)
    best_first = dict(sorted(weights.items(), key=lambda item: -item[1]))
    return best_first, HeldOut(valid, test, submission_metric(task, valid, truth),
                               submission_metric(task, test, task.test_y))

def cross_fitted(task: PreparedTask, candidates: Mapping[str, pd.DataFrame], truth: pd.Series,
                 groups: np.ndarray, size: int = SIZE) -> pd.DataFrame:
    """Held-out predictions of ensemble selection over `candidates` in which the rows of each
    group (`groups[r]`, one per row) are blended with weights selected on the other groups'
    rows. Needs at least two groups."""
    truth = truth.reset_index(drop=True)
    if len(np.unique(groups)) < 2:
        raise ValueError("cross-fitting needs at least two groups of rows")
    parts = []
    for group in np.unique(groups):
        held, learn = np.flatnonzero(groups == group), np.flatnonzero(groups != group)
        weights = select_weights(task, {i: f.iloc[learn].reset_index(drop=True)
                                        for i, f in candidates.items()}, truth.iloc[learn], size)
        part = blend(task, {i: candidates[i].iloc[held].reset_index(drop=True)
                            for i in weights}, weights)
        parts.append(part.set_axis(held))
    return pd.concat(parts).sort_index()
