"""Idea pools that steer a small model: one model family per draft, one change per improve.

Policies pick from these by counting siblings (finished and in flight), so concurrent
workers get different ideas even when the model decodes at low temperature. With the engine's
floor on (search/floor.py), tuning, other model families and ensembles are the engine's own
work, so improvements ask for what only the model can do: features from reasoning about the
columns (CAAFE-style, seed 001).
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


FEATURE_IDEAS = (
    "add a few engineered features (ratios, products or sums of numeric columns)",
    "add ratios or differences of the numeric columns most related to the target",
    "handle skew: log-transform skewed numeric features",
    "add group statistics: the mean of an important numeric column within each value of a "
    "text column",
    "add counts: how often each value of a text column occurs, as a new numeric column",
    "add an interaction feature of the two columns that matter most",
)
# With the floor on, a draft is what the portfolio does not hold: a model on new features.
FEATURE_DRAFTS = (
    "gradient boosting with lightgbm (LGBMRegressor / LGBMClassifier) on the prepared columns "
    "plus a few engineered features (ratios, products or sums of numeric columns)",
    "a random forest from scikit-learn on the prepared columns plus a few engineered features",
)
IDEA_POOLS = {"all": IMPROVE_IDEAS, "features": FEATURE_IDEAS}
DRAFT_POOLS = {"all": DRAFT_IDEAS, "features": FEATURE_DRAFTS}


def draft_idea(index: int, pool: str = "all") -> str:
    ideas = DRAFT_POOLS[pool]
    return ideas[index % len(ideas)]


def improve_idea(index: int, pool: str = "all") -> str:
    ideas = IDEA_POOLS[pool]
    return ideas[index % len(ideas)]
