"""Request verification: is this task feasible with this data, before any search starts?

The hard checks are errors raised while the task is prepared (`engine.task.prepare.prepare_task`: a
readable CSV with at least 10 labelled rows, a target that varies, a metric that fits the task
type, two classes in every split) or while a plain-language request is resolved
(`engine.task.request`: a target that is a column, a direction that fits the metric). This module
adds the soft ones: facts that make a run weak or its score misleading but not impossible.
They are printed before the search, kept in the manifest and listed in summary.md.

A class with a single row is a warning, not an error: such a class cannot be in train and
valid both, so it is never learned or never scored, but refusing a dataset with one odd label
among thousands helps nobody (the split then falls back to unstratified).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from common.metric import label_strs
from engine.task.prepare import PreparedTask

# A valid split smaller than this makes scores move by several points between equal models.
MIN_VALID_ROWS = 50
# Fewer valid rows of a class than this make its part of F1 / AUC a coin toss.
MIN_VALID_CLASS_ROWS = 5


def request_warnings(task: PreparedTask) -> list[str]:
    """One line per soft problem of `task`; [] when none."""
    out = []
    valid_rows = len(task.valid_X)
    if valid_rows < MIN_VALID_ROWS:
        out.append(f"the valid split has {valid_rows} rows: scores are noisy; more data "
                   "would make the search's choices more reliable")
    if task.task_type != "regression":
        counts = Counter(label_strs(pd.concat([task.train[task.target], task.valid_y,
                                                task.test_y], ignore_index=True)))
        single = sorted(label for label, n in counts.items() if n < 2)
        if single:
            out.append(f"class(es) {', '.join(map(repr, single[:5]))} of `{task.target}` have "
                       "a single row: it cannot be both learned and scored; consider dropping it")
        valid = Counter(label_strs(task.valid_y))
        rare = sorted(label for label in task.labels
                      if 0 < valid.get(label, 0) < MIN_VALID_CLASS_ROWS)
        if rare:
            out.append(f"class(es) {', '.join(map(repr, rare[:5]))} have fewer than "
                       f"{MIN_VALID_CLASS_ROWS} valid rows: their part of the score is noisy")
    features = pd.concat([task.train.drop(columns=[task.target]), task.valid_X])
    empty = [str(c) for c in features.columns if features[c].isna().all()]
    if empty:
        out.append(f"column(s) {', '.join(f'`{c}`' for c in empty[:5])} are empty in every "
                   "train and valid row: no model can learn from them; drop them or fill them")
    leaks = _target_copies(task.train, task.target, task.task_type == "regression")
    if leaks:
        out.append(f"column(s) {', '.join(f'`{c}`' for c in leaks[:5])} equal the target "
                   f"`{task.target}` in every train row (leakage?); drop them unless they are "
                   "known when predicting")
    return out


SCREEN_ROWS = 10_000


def _target_copies(train: pd.DataFrame, target: str, regression: bool) -> list[str]:
    """Feature columns that are the target: for classes, up to a one-to-one relabelling; for a
    number, up to a linear rescaling (a price in cents)."""
    out = []
    if regression:
        y_num = train[target].astype(float)
        for column in train.columns:
            x_num = train[column]
            if column == target or not pd.api.types.is_numeric_dtype(x_num):
                continue
            both = pd.DataFrame({"x": x_num.astype(float), "y": y_num}).dropna()
            if len(both) > 2 and both.x.std() > 0 and abs(both.x.corr(both.y)) > 0.99999:
                out.append(str(column))
        return out
    # Codes of the raw values, not their text, and only for a column whose first rows have no
    # more levels than the target: astype(str) of every column took most of a million-row
    # table's start-up (benchmarks/results/big-data-2026-12-07).
    y_codes, y_levels = pd.factorize(train[target].astype(str))
    for column in train.columns:
        if column == target or train[column].iloc[:SCREEN_ROWS].nunique(dropna=False) > len(
                y_levels):
            continue
        x_codes, x_levels = pd.factorize(train[column], use_na_sentinel=False)
        if len(x_levels) != len(y_levels):
            continue
        pairs = np.unique(x_codes.astype(np.int64) * len(y_levels) + y_codes)
        if len(pairs) == len(y_levels):
            out.append(str(column))
    return out
