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


TEXT_FEATURE_IDEAS = (  # only for tasks with text columns
    "add group statistics: the mean of an important numeric column within each value of a "
    "text column",
    "add counts: how often each value of a text column occurs, as a new numeric column",
)
FEATURE_IDEAS = (
    "add a few engineered features (ratios, products or sums of numeric columns)",
    "add ratios or differences of the numeric columns most related to the target",
    "handle skew: log-transform skewed numeric features",
    *TEXT_FEATURE_IDEAS,
    "add an interaction feature of the two columns that matter most",
)
# On numbers alone a text-column idea makes the model invent one: on concrete, asked for value
# counts of a text column, it one-hot encoded every numeric column.
NUMERIC_FEATURE_IDEAS = tuple(i for i in FEATURE_IDEAS if i not in TEXT_FEATURE_IDEAS)
# With the floor on, a draft is what the portfolio does not hold: a model on new features.
FEATURE_DRAFTS = (
    "gradient boosting with lightgbm (LGBMRegressor / LGBMClassifier) on the prepared columns "
    "plus a few engineered features (ratios, products or sums of numeric columns)",
    "a random forest from scikit-learn on the prepared columns plus a few engineered features",
)
IDEA_POOLS = {"all": IMPROVE_IDEAS, "features": FEATURE_IDEAS,
              "numeric_features": NUMERIC_FEATURE_IDEAS}
DRAFT_POOLS = {"all": DRAFT_IDEAS, "features": FEATURE_DRAFTS, "numeric_features": FEATURE_DRAFTS}


def idea_pool(floor: bool, text_columns: bool) -> str:
    """The pool a search asks from: with the floor on, features only, and ideas about text
    columns only when the task has some."""
    if not floor:
        return "all"
    return "features" if text_columns else "numeric_features"


def draft_idea(index: int, pool: str = "all") -> str:
    ideas = DRAFT_POOLS[pool]
    return ideas[index % len(ideas)]


def improve_idea(index: int, pool: str = "all") -> str:
    ideas = IDEA_POOLS[pool]
    return ideas[index % len(ideas)]
