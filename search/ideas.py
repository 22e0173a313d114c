"""Idea pools that steer a small model: one model family per draft, one change per improve.

Policies pick from these by counting siblings (finished and in flight), so concurrent
workers get different ideas even when the model decodes at low temperature.
"""

from __future__ import annotations

DRAFT_IDEAS = (
    "gradient boosting with lightgbm (LGBMRegressor / LGBMClassifier)",
    "a random forest from scikit-learn",
    "HistGradientBoosting from scikit-learn",
    "extra trees from scikit-learn",
    "a linear model (Ridge / LogisticRegression) on standardised features",
)

IMPROVE_IDEAS = (
    "tune the model's main hyperparameters (more trees, a smaller learning rate, "
    "deeper or shallower trees)",
    "add a few engineered features (ratios, products or sums of numeric columns)",
    "switch to a stronger model family (e.g. lightgbm if not used yet)",
    "average the predictions of the current model and a second, different model",
    "handle skew: log-transform skewed numeric features",
    "use 5-fold cross-validation on the training data to choose one hyperparameter",
)


def draft_idea(index: int) -> str:
    return DRAFT_IDEAS[index % len(DRAFT_IDEAS)]


def improve_idea(index: int) -> str:
    return IMPROVE_IDEAS[index % len(IMPROVE_IDEAS)]
