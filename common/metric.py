"""The metric table: each metric's direction, the tasks it fits, its formula, its resampled form
and its perfect value, in one place; the engine's scorer and the final selection both use it.

Nodes store `metric` normalised so that higher is always better (`-rmse`, `f1`), plus the raw
value. Policies compare normalised values only; a failed node has no metric and loses to all.

Inputs of a formula: classification truth and predictions as label strings (`label_str`),
regression as floats; `proba` one column per label, named by the label (for binary, the
positive class's column alone, or the negative's, is enough); `labels` the task's sorted
labels. Formula rules:
- f1: F1 of the positive class, `positive_label` (the label reading '1', 'yes', 'true' or
  'positive' if exactly one does, else the last of the sorted labels).
- roc_auc: binary from the positive class's probability; multiclass one-vs-rest, each class's
  AUC weighted by its share of y_true (sklearn's ovr/weighted). Computed per class so that
  probabilities rounded in a CSV need not sum to exactly 1.
- log_loss: probabilities floored at 1e-15 and each row rescaled to sum to 1 (binary: the
  positive class's probability clipped to [1e-15, 1 - 1e-15]).

A resampled form scores many bootstrap resamples at once: `counts` holds one resample per row
(how often each row was drawn), so one matrix product scores them all (roc_auc: the
Mann-Whitney count with each row weighted by its draws). Every metric has one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

TASK_TYPES = ("binary", "multiclass", "regression")
POSITIVE_WORDS = frozenset({"1", "yes", "true", "positive"})
_LOG_LOSS_EPS = 1e-15

Formula = Callable[[np.ndarray, np.ndarray, "pd.DataFrame | None", Sequence[str]], float]
Resampled = Callable[[np.ndarray, np.ndarray, "pd.DataFrame | None", Sequence[str], np.ndarray],
                     np.ndarray]


def label_str(value: object) -> str:
    """A class label as a string: 1, 1.0 and np.int64(1) are all '1'; True is 'True'."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def label_strs(values: Sequence[object] | np.ndarray | pd.Series) -> np.ndarray:
    """`label_str` of each value (an object array): once per distinct value where the values
    share a numpy or pandas type, as a million labels one by one took seconds of a big table's
    start-up (benchmarks/results/big-data-2026-12-07). Objects go one by one, since hashing
    takes True for 1, but text is its own label: checked predictions hold it (2.56 million of
    them: 1.7 s one by one, 0.09 s to check they are all text)."""
    array = values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values)
    if array.dtype == object and all(type(v) is str for v in array):
        return array.copy()
    if array.dtype == object or len(array) == 0:
        return np.asarray([label_str(v) for v in array], dtype=object)
    codes, uniques = pd.factorize(array, use_na_sentinel=False)
    return np.asarray([label_str(v) for v in uniques], dtype=object)[codes]


def positive_label(labels: Sequence[str]) -> str:
    """The positive class of a binary task, used by f1 and by binary roc_auc / log_loss.

    The label that reads as positive ('1', 'yes', 'true', 'positive', any case) when exactly one
    does; otherwise the last of the sorted labels ('1' of 0/1, 'good' of bad/good).
    """
    named = [label for label in labels if label.strip().lower() in POSITIVE_WORDS]
    return named[0] if len(named) == 1 else labels[-1]


# --- formulas ---------------------------------------------------------------------------------


def _rmse(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
          labels: Sequence[str]) -> float:
    return float(np.sqrt(np.mean((truth - pred) ** 2)))


def _mae(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
         labels: Sequence[str]) -> float:
    return float(np.mean(np.abs(truth - pred)))


def _r2(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
        labels: Sequence[str]) -> float:
    from sklearn.metrics import r2_score

    return float(r2_score(truth, pred))


def _accuracy(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
              labels: Sequence[str]) -> float:
    return float(np.mean(truth == pred))


def _f1(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
        labels: Sequence[str]) -> float:
    positive = positive_label(labels)
    tp = int(np.sum((pred == positive) & (truth == positive)))
    fp = int(np.sum((pred == positive) & (truth != positive)))
    fn = int(np.sum((pred != positive) & (truth == positive)))
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def _f1_weighted(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                 labels: Sequence[str]) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(truth, pred, labels=list(labels), average="weighted",
                          zero_division=0.0))


def _positive_proba(proba: pd.DataFrame, labels: Sequence[str]) -> np.ndarray:
    positive = positive_label(labels)
    if positive in proba.columns:
        return proba[positive].to_numpy(dtype=float)
    negative = next(label for label in labels if label != positive)
    if negative in proba.columns:
        return 1.0 - proba[negative].to_numpy(dtype=float)
    raise ValueError(f"proba has no column for class {positive!r}")


def _needs(proba: pd.DataFrame | None, name: str) -> pd.DataFrame:
    if proba is None:
        raise ValueError(f"metric {name} needs class probabilities")
    return proba


def _roc_auc(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
             labels: Sequence[str]) -> float:
    from sklearn.metrics import roc_auc_score

    proba = _needs(proba, "roc_auc")
    if len(labels) == 2:
        return float(roc_auc_score(truth == positive_label(labels), _positive_proba(proba, labels)))
    total = weight = 0.0
    for label in labels:
        is_label = truth == label
        support = int(is_label.sum())
        # A class absent from y_true has weight 0 in sklearn's ovr/weighted average too.
        if 0 < support < len(truth):
            total += support * float(roc_auc_score(is_label, proba[label].to_numpy(dtype=float)))
            weight += support
    if not weight:
        raise ValueError("roc_auc needs at least two classes in y_true")
    return total / weight


def _log_loss(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
              labels: Sequence[str]) -> float:
    return float(np.mean(_log_losses(truth, proba, labels)))


def _log_losses(truth: np.ndarray, proba: pd.DataFrame | None,
                labels: Sequence[str]) -> np.ndarray:
    """Each row's log loss: what the metric averages."""
    proba = _needs(proba, "log_loss")
    if len(labels) == 2:
        p_positive = np.clip(_positive_proba(proba, labels), _LOG_LOSS_EPS, 1 - _LOG_LOSS_EPS)
        p_true = np.where(truth == positive_label(labels), p_positive, 1 - p_positive)
        return np.asarray(-np.log(p_true))
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted(set(truth) - set(index))
    if unknown:
        raise ValueError(f"y_true has labels outside `labels`: {unknown[:5]}")
    # Only a floor: rows are rescaled to sum to 1 next, so a row written as percentages or
    # rounded in a CSV still reads as the distribution it meant.
    matrix = np.maximum(proba[list(labels)].to_numpy(dtype=float), _LOG_LOSS_EPS)
    matrix = matrix / matrix.sum(axis=1, keepdims=True)
    rows = np.arange(len(truth))
    cols = np.asarray([index[label] for label in truth])
    return np.asarray(-np.log(matrix[rows, cols]))


# --- resampled forms --------------------------------------------------------------------------


def _rmse_resampled(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                    labels: Sequence[str], counts: np.ndarray) -> np.ndarray:
    return np.asarray(np.sqrt(counts @ (truth - pred) ** 2 / counts.shape[1]))


def _mae_resampled(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                   labels: Sequence[str], counts: np.ndarray) -> np.ndarray:
    return np.asarray(counts @ np.abs(truth - pred) / counts.shape[1])


def _r2_resampled(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                  labels: Sequence[str], counts: np.ndarray) -> np.ndarray:
    n = counts.shape[1]
    spread = counts @ truth**2 / n - (counts @ truth / n) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(1.0 - (counts @ (truth - pred) ** 2 / n) / spread)


def _accuracy_resampled(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                        labels: Sequence[str], counts: np.ndarray) -> np.ndarray:
    return np.asarray(counts @ (truth == pred) / counts.shape[1])


def _f1_resampled(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                  labels: Sequence[str], counts: np.ndarray, *,
                  weighted: bool = False) -> np.ndarray:
    n = counts.shape[1]
    total = np.zeros(len(counts))
    for label in (list(labels) if weighted else [positive_label(labels)]):
        true_count = counts @ (truth == label)
        hits = counts @ ((truth == label) & (pred == label))
        both = true_count + counts @ (pred == label)
        f1 = np.divide(2 * hits, both, out=np.zeros_like(both), where=both > 0)
        total += true_count * f1 / n if weighted else f1
    return total


def _f1_weighted_resampled(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                           labels: Sequence[str], counts: np.ndarray) -> np.ndarray:
    return _f1_resampled(truth, pred, proba, labels, counts, weighted=True)


def _auc_resampled(positive: np.ndarray, scores: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """ROC AUC of `scores` for the rows marked `positive`, on every resample at once: the
    Mann-Whitney count with each row weighted by how often it was drawn (a tie counts half).
    NaN on a resample that drew one class only."""
    values, group = np.unique(scores, return_inverse=True)
    # per resample and score value: how many negatives were drawn with that score
    negatives = np.zeros((len(values), len(counts)))
    np.add.at(negatives, group[~positive], counts[:, ~positive].T)
    below = np.cumsum(negatives, axis=0) - negatives  # negatives drawn with a lower score
    beaten = (below + 0.5 * negatives)[group[positive]].T  # per resample, per positive row
    wins = (counts[:, positive] * beaten).sum(axis=1)
    pairs = counts[:, positive].sum(axis=1) * counts[:, ~positive].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pairs > 0, wins / pairs, np.nan)


def _roc_auc_resampled(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                       labels: Sequence[str], counts: np.ndarray) -> np.ndarray:
    """`_roc_auc` on every resample: binary, or one-vs-rest weighted by each class's drawn
    support, leaving out a class that a resample drew none or all of."""
    proba = _needs(proba, "roc_auc")
    if len(labels) == 2:
        return _auc_resampled(truth == positive_label(labels), _positive_proba(proba, labels),
                              counts)
    total = np.zeros(len(counts))
    weight = np.zeros(len(counts))
    drawn = counts.sum(axis=1)
    for label in labels:
        is_label = truth == label
        support = counts[:, is_label].sum(axis=1)
        counted = (support > 0) & (support < drawn)
        if not counted.any():
            continue
        auc = _auc_resampled(is_label, proba[label].to_numpy(dtype=float), counts)
        total += np.where(counted, support * np.nan_to_num(auc), 0.0)
        weight += np.where(counted, support, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(weight > 0, total / weight, np.nan)


def _log_loss_resampled(truth: np.ndarray, pred: np.ndarray, proba: pd.DataFrame | None,
                        labels: Sequence[str], counts: np.ndarray) -> np.ndarray:
    return np.asarray(counts @ _log_losses(truth, proba, labels) / counts.shape[1])


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    maximize: bool
    task_types: tuple[str, ...]
    formula: Formula
    perfect: float  # the best value it can take (a node reaching it is flagged)
    resampled: Resampled  # the same value on many bootstrap resamples at once
    needs_proba: bool = False
    description: str = ""

    def normalise(self, raw: float) -> float:
        """Map a raw value to the higher-is-better scale the search uses."""
        return raw if self.maximize else -raw

    def denormalise(self, value: float) -> float:
        return value if self.maximize else -value

    @property
    def regression(self) -> bool:
        return self.task_types == ("regression",)

    def score(self, y_true: Sequence[object] | pd.Series, y_pred: Sequence[object] | pd.Series,
              proba: pd.DataFrame | None, labels: Sequence[str]) -> float:
        """The raw value on these rows; class labels may be given as any value."""
        if len(y_true) != len(y_pred):
            raise ValueError(f"y_true has {len(y_true)} values, y_pred {len(y_pred)}")
        if len(y_true) == 0:
            raise ValueError("cannot score zero rows")
        truth, pred = self._arrays(y_true, y_pred)
        return self.formula(truth, pred, proba, labels)

    def score_resamples(self, y_true: Sequence[object] | pd.Series,
                        y_pred: Sequence[object] | pd.Series, proba: pd.DataFrame | None,
                        labels: Sequence[str], counts: np.ndarray) -> np.ndarray:
        """The raw value on each resample, a row of `counts` (how often each row was drawn)."""
        truth, pred = self._arrays(y_true, y_pred)
        return self.resampled(truth, pred, proba, labels, counts)

    def _arrays(self, y_true: Sequence[object] | pd.Series,
                y_pred: Sequence[object] | pd.Series) -> tuple[np.ndarray, np.ndarray]:
        if self.regression:
            return np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
        return label_strs(y_true), label_strs(y_pred)


_CLS = ("binary", "multiclass")
_REG = ("regression",)
METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec("f1", True, ("binary",), _f1, 1.0, _f1_resampled,
                   description="F1 of the positive class"),
        MetricSpec("f1_weighted", True, _CLS, _f1_weighted, 1.0, _f1_weighted_resampled,
                   description="support-weighted F1 over classes"),
        MetricSpec("accuracy", True, _CLS, _accuracy, 1.0, _accuracy_resampled,
                   description="share of correct labels"),
        MetricSpec("roc_auc", True, _CLS, _roc_auc, 1.0, _roc_auc_resampled, needs_proba=True,
                   description="ROC AUC (one-vs-rest, weighted, for multiclass)"),
        MetricSpec("log_loss", False, _CLS, _log_loss, 0.0, _log_loss_resampled, needs_proba=True,
                   description="cross-entropy"),
        MetricSpec("rmse", False, _REG, _rmse, 0.0, _rmse_resampled,
                   description="root mean squared error"),
        MetricSpec("mae", False, _REG, _mae, 0.0, _mae_resampled,
                   description="mean absolute error"),
        MetricSpec("r2", True, _REG, _r2, 1.0, _r2_resampled,
                   description="coefficient of determination"),
    )
}

DEFAULT_METRIC = {"binary": "f1", "multiclass": "f1_weighted", "regression": "rmse"}


def is_finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def normalised_score(raw: float, maximize: bool) -> float:
    """SELA's normalised score (NS) in [0, 1], higher is better: a maximised metric as it is
    (F1, accuracy and AUC already lie in [0, 1]; a negative R² counts as 0), a minimised one as
    1 / (1 + raw) (RMSE, MAE, log-loss). Nearly flat for targets on a large scale (an RMSE of
    500 and of 600 both give ~0.002), which is why the benchmark report also compares against
    LightGBM with default settings."""
    if maximize:
        return min(1.0, max(0.0, raw))
    return 1.0 / (1.0 + max(0.0, raw))
