"""Deterministic repair of the import mistakes a small model makes most.

A 1.5B model often uses `RandomForestRegressor` without importing it, or imports
`HistGradientBoostingRegressor` from lightgbm. Each such slip costs a debug round trip (tens of
seconds of generation); fixing them before execution costs nothing and changes no logic.
"""

from __future__ import annotations

import ast
import builtins

_SKLEARN = {
    "sklearn.ensemble": (
        "RandomForestRegressor", "RandomForestClassifier", "ExtraTreesRegressor",
        "ExtraTreesClassifier", "GradientBoostingRegressor", "GradientBoostingClassifier",
        "HistGradientBoostingRegressor", "HistGradientBoostingClassifier",
        "VotingRegressor", "VotingClassifier", "StackingRegressor", "StackingClassifier",
    ),
    "sklearn.linear_model": (
        "LinearRegression", "LogisticRegression", "Ridge", "Lasso", "ElasticNet", "RidgeCV",
        "LassoCV", "LogisticRegressionCV",
    ),
    "sklearn.preprocessing": (
        "StandardScaler", "MinMaxScaler", "OneHotEncoder", "LabelEncoder", "OrdinalEncoder",
        "PolynomialFeatures", "RobustScaler",
    ),
    "sklearn.model_selection": (
        "train_test_split", "KFold", "StratifiedKFold", "cross_val_score", "GridSearchCV",
        "RandomizedSearchCV", "cross_val_predict",
    ),
    "sklearn.metrics": (
        "mean_squared_error", "root_mean_squared_error", "mean_absolute_error", "r2_score",
        "f1_score", "accuracy_score", "roc_auc_score", "log_loss",
    ),
    "sklearn.pipeline": ("Pipeline", "make_pipeline"),
    "sklearn.impute": ("SimpleImputer",),
    "sklearn.compose": ("ColumnTransformer",),
    "sklearn.svm": ("SVR", "SVC"),
    "sklearn.neighbors": ("KNeighborsRegressor", "KNeighborsClassifier"),
    "lightgbm": ("LGBMRegressor", "LGBMClassifier"),
}
# The engine's metric names are not sklearn functions, yet a small model told "scored with
# f1_weighted" imports exactly that from sklearn.metrics: bind each to the real function.
METRIC_SHIMS = {
    "f1_weighted": ("from functools import partial", "from sklearn.metrics import f1_score",
                    "f1_weighted = partial(f1_score, average='weighted')"),
    "rmse": ("from sklearn.metrics import root_mean_squared_error as rmse",),
    "mae": ("from sklearn.metrics import mean_absolute_error as mae",),
    "r2": ("from sklearn.metrics import r2_score as r2",),
    "roc_auc": ("from sklearn.metrics import roc_auc_score as roc_auc",),
    "accuracy": ("from sklearn.metrics import accuracy_score as accuracy",),
}
KNOWN: dict[str, str] = {name: module for module, names in _SKLEARN.items() for name in names}
MODULES = {"np": "import numpy as np", "pd": "import pandas as pd", "lgb": "import lightgbm as lgb",
           "lightgbm": "import lightgbm", "optuna": "import optuna", "math": "import math"}
# Names the harness defines around the model code.
HARNESS_NAMES = frozenset({"prepare", "X", "y", "X_valid", "X_test", "TARGET", "train", "os",
                           "re", "np", "pd"})


def fix_imports(code: str) -> str:
    """Add imports for known names used but never bound, and move known names imported from
    the wrong module to the right one. Code that does not parse is returned unchanged."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    lines = code.splitlines()
    added: list[str] = []
    bound = set(HARNESS_NAMES) | set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.lineno == node.end_lineno:
            wrong = [a for a in node.names
                     if a.name in KNOWN and KNOWN[a.name] != node.module
                     and node.module.split(".")[0] in ("sklearn", "lightgbm")]
            shims = [a for a in node.names if a.name in METRIC_SHIMS and not a.asname
                     and node.module == "sklearn.metrics"]
            if wrong or shims:
                keep = [a for a in node.names if a not in wrong and a not in shims]
                indent = lines[node.lineno - 1][: node.col_offset]
                lines[node.lineno - 1] = (
                    f"{indent}from {node.module} import "
                    + ", ".join(_alias(a) for a in keep) if keep else f"{indent}pass"
                )
                added += [f"from {KNOWN[a.name]} import {_alias(a)}" for a in wrong]
                added += [line for a in shims for line in METRIC_SHIMS[a.name]]
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for name in sorted(used - bound):
        if name in KNOWN:
            added.append(f"from {KNOWN[name]} import {name}")
        elif name in MODULES:
            added.append(MODULES[name])
    if not added:
        return code
    return "\n".join([*dict.fromkeys(added), *lines]) + "\n"


def _alias(alias: ast.alias) -> str:
    return f"{alias.name} as {alias.asname}" if alias.asname else alias.name
