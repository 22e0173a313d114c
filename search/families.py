"""The model families the engine fits on its own, with no LLM call: their hyperparameter spaces
and the portfolio of fixed configurations tried first.

Pure data: `operators.models` writes the code of a (family, params) pair and `search.floor`
decides which pair runs next. The portfolio follows AutoGluon's zero-shot idea (a few strong,
diverse configurations, no tuning), cheapest first, so a short run already holds several
different good models for ensemble selection; the spaces are what Optuna samples afterwards.
The spaces keep every fit to a few seconds on a few thousand rows on one core, since each
trial runs once per fold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A dimension: (name, kind, low, high) for kind "int" | "float" | "log_int" | "log_float", or
# (name, "categorical", choices, None).
Dimension = tuple[str, str, Any, Any]


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    description: str  # what the model is, for a person reading the tree
    space: tuple[Dimension, ...]
    fixed: tuple[tuple[str, Any], ...] = ()  # always passed, never tuned


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("lgbm", "LightGBM gradient boosting", (
        ("n_estimators", "log_int", 50, 600),
        ("learning_rate", "log_float", 0.01, 0.3),
        ("num_leaves", "log_int", 4, 128),
        ("min_child_samples", "log_int", 2, 60),
        ("subsample", "float", 0.5, 1.0),
        ("colsample_bytree", "float", 0.3, 1.0),
        ("reg_alpha", "log_float", 1e-8, 10.0),
        ("reg_lambda", "log_float", 1e-8, 10.0),
    )),
    Family("extra_trees", "extremely randomised trees", (
        ("n_estimators", "int", 100, 400),
        ("max_features", "float", 0.2, 1.0),
        ("min_samples_leaf", "log_int", 1, 16),
    )),
    Family("random_forest", "random forest", (
        ("n_estimators", "int", 100, 400),
        ("max_features", "float", 0.2, 1.0),
        ("min_samples_leaf", "log_int", 1, 16),
    )),
    Family("hist_gb", "scikit-learn histogram gradient boosting", (
        ("max_iter", "log_int", 50, 600),
        ("learning_rate", "log_float", 0.01, 0.3),
        ("max_leaf_nodes", "log_int", 4, 128),
        ("min_samples_leaf", "log_int", 2, 60),
        ("l2_regularization", "log_float", 1e-8, 10.0),
    )),
    Family("linear", "a linear model (ridge / logistic regression) on standardised features", (
        ("alpha", "log_float", 1e-3, 1e3),
    )),
    Family("knn", "k nearest neighbours on standardised features", (
        ("n_neighbors", "log_int", 2, 64),
        ("weights", "categorical", ("uniform", "distance"), None),
    )),
)}

# Cheapest first. The baseline root (LightGBM with defaults) runs before all of them.
PORTFOLIO: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("linear", "linear", {"alpha": 1.0}),
    ("knn", "knn", {"n_neighbors": 10, "weights": "distance"}),
    ("extra_trees", "extra_trees", {"n_estimators": 300, "max_features": 0.5,
                                    "min_samples_leaf": 1}),
    ("random_forest", "random_forest", {"n_estimators": 300, "max_features": 0.5,
                                        "min_samples_leaf": 1}),
    ("lgbm_small_lr", "lgbm", {"n_estimators": 400, "learning_rate": 0.03, "num_leaves": 31,
                               "min_child_samples": 10, "subsample": 0.8,
                               "colsample_bytree": 0.7, "reg_alpha": 1e-8, "reg_lambda": 1.0}),
    ("hist_gb", "hist_gb", {"max_iter": 200, "learning_rate": 0.1, "max_leaf_nodes": 31,
                            "min_samples_leaf": 20, "l2_regularization": 1e-8}),
    ("lgbm_large", "lgbm", {"n_estimators": 300, "learning_rate": 0.03, "num_leaves": 128,
                            "min_child_samples": 3, "subsample": 1.0, "colsample_bytree": 0.9,
                            "reg_alpha": 1e-8, "reg_lambda": 1e-8}),
    ("lgbm_shallow", "lgbm", {"n_estimators": 600, "learning_rate": 0.05, "num_leaves": 8,
                              "min_child_samples": 20, "subsample": 0.7,
                              "colsample_bytree": 0.5, "reg_alpha": 1e-8, "reg_lambda": 5.0}),
)
