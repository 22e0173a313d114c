"""Metrics that know their direction.

Nodes store `metric` normalised so that higher is always better (`-rmse`, `f1`), plus the raw
value. Policies compare normalised values only; a failed node has no metric and loses to all.
The formulas themselves live in the engine's scorer (they need scikit-learn); this module holds
what a policy or prompt needs to know about a metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TASK_TYPES = ("binary", "multiclass", "regression")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    maximize: bool
    task_types: tuple[str, ...]
    needs_proba: bool = False
    description: str = ""

    def normalise(self, raw: float) -> float:
        """Map a raw value to the higher-is-better scale the search uses."""
        return raw if self.maximize else -raw

    def denormalise(self, value: float) -> float:
        return value if self.maximize else -value


_CLS = ("binary", "multiclass")
METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec("f1", True, ("binary",), description="F1 of the positive class"),
        MetricSpec("f1_weighted", True, _CLS, description="support-weighted F1 over classes"),
        MetricSpec("accuracy", True, _CLS, description="share of correct labels"),
        MetricSpec("roc_auc", True, _CLS, needs_proba=True,
                   description="ROC AUC (one-vs-rest, weighted, for multiclass)"),
        MetricSpec("log_loss", False, _CLS, needs_proba=True, description="cross-entropy"),
        MetricSpec("rmse", False, ("regression",), description="root mean squared error"),
        MetricSpec("mae", False, ("regression",), description="mean absolute error"),
        MetricSpec("r2", True, ("regression",), description="coefficient of determination"),
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
