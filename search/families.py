"""The model families the engine fits on its own, with no LLM call: one record per family
(`Family`) holds all the engine knows of it: its hyperparameter space, its portfolio entries,
and the code text of its model (import lines, regressor and classifier constructors taking
`PARAMS`). Adding a family is adding one record here.

Pure data: `operators.models` writes the code of a (family, params) pair from its record and
`search.floor` decides which pair runs next. The portfolio follows AutoGluon's zero-shot idea (a
few strong, diverse configurations, no tuning), cheapest first, so a short run already holds
several different good models for ensemble selection; the spaces are what Optuna samples
afterwards. The spaces keep every fit to a few seconds on a few thousand rows on one core, since
each trial runs once per fold.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

# A dimension: (name, kind, low, high) for kind "int" | "float" | "log_int" | "log_float", or
# (name, "categorical", choices, None).
Dimension = tuple[str, str, Any, Any]

# How a family that takes a seed spells it in its constructors: every trial fits with seed 0,
# and a feature program's gate replaces it with its own seeds (operators/models.py gate_part).
TRIAL_SEED = "random_state=0"


@dataclass(frozen=True, slots=True)
class Configuration:
    """A portfolio entry: fixed hyperparameters, run once before any tuning."""
    name: str
    place: int  # its place in PORTFOLIO, cheapest first (spaced by 10 to leave room)
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Size:
    """What a floor node's cost grows with: the rows each fit learns from, the rows each fit
    predicts (held-out and test), the feature columns, and the fits in the node's run (one
    per fold)."""
    learn: int
    predict: int
    columns: int
    fits: int = 1


# The seconds of one fit and its predictions on one core, beyond the run's start and reading
# (`node_seconds`): the family's `cost` of its params and a Size.
Cost = Callable[[Mapping[str, Any], Size], float]


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    description: str  # what the model is, for a person reading the tree
    space: tuple[Dimension, ...]
    portfolio: tuple[Configuration, ...]
    imports: str  # the import lines its constructors need
    regressor: str  # code text: an unfitted estimator built from PARAMS, as the harness
    classifier: str  # writes it inside `Encoded(...)` (operators/models.py)
    cost: Cost
    trees: str | None = None  # the parameter a node is sized down by (None: it cannot be)
    # Whether its fit stops early on EARLY_STOP_ROWS learning rows or more (the harness's
    # `fit_stopping_early`; scikit-learn's histogram boosting by itself): its trees are then a
    # cap, raised to what RAISED_SHARE of a node's share affords (`sized`).
    stops: bool = False

    def model(self, regression: bool) -> str:
        return self.regressor if regression else self.classifier

    def seeded(self, regression: bool) -> bool:
        """Whether its model takes a seed (another seed fits another model)."""
        return TRIAL_SEED in self.model(regression)


_SCALED = ("from sklearn.pipeline import make_pipeline\n"
           "from sklearn.preprocessing import StandardScaler")

# Each family's cost (`Family.cost`), in seconds on one core: per tree (or boosting round; for
# CatBoost per level of its trees) and per learning row and column, and per tree and predicted
# row. Fitted to benchmarks.fit_cost's runs: benchmarks/results/big-data-2026-12-06.
# LightGBM also pays per leaf and column (finding splits) and per predicted row and level.
LGBM_FIT, LGBM_PREDICT, LGBM_SPLIT = 5.4e-9, 1.8e-8, 3.6e-6
CATBOOST_FIT, CATBOOST_PREDICT = 1.3e-9, 1.2e-8
HIST_FIT, HIST_PREDICT = 3.3e-9, 2.0e-7
# A forest's trees grow to their leaves: per tree, row, column drawn and level (log2 of rows)
EXTRA_FIT, FOREST_FIT, FOREST_PREDICT = 1.5e-8, 5.8e-8, 9.4e-9
LINEAR_FIT = 1.1e-7
KNN_PREDICT = 2.0e-10  # per learning row, predicted row and column (brute-force distances)


def _forest(fit: float, p: Mapping[str, Any], s: Size) -> float:
    """A forest's seconds per tree: grown on a share of the columns to a depth of about
    log2(rows / min_samples_leaf), then walked by every predicted row."""
    depth = math.log2(max(2.0, s.learn / p["min_samples_leaf"]))
    return depth * (fit * s.learn * s.columns * p["max_features"] + FOREST_PREDICT * s.predict)


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family(
        "lgbm", "LightGBM gradient boosting", (
            ("n_estimators", "log_int", 50, 600),
            ("learning_rate", "log_float", 0.01, 0.3),
            ("num_leaves", "log_int", 4, 128),
            ("min_child_samples", "log_int", 2, 60),
            ("subsample", "float", 0.5, 1.0),
            ("colsample_bytree", "float", 0.3, 1.0),
            ("reg_alpha", "log_float", 1e-8, 10.0),
            ("reg_lambda", "log_float", 1e-8, 10.0),
        ), (
            Configuration("lgbm_small_lr", 50, {
                "n_estimators": 400, "learning_rate": 0.03, "num_leaves": 31,
                "min_child_samples": 10, "subsample": 0.8, "colsample_bytree": 0.7,
                "reg_alpha": 1e-8, "reg_lambda": 1.0}),
            Configuration("lgbm_large", 70, {
                "n_estimators": 300, "learning_rate": 0.03, "num_leaves": 128,
                "min_child_samples": 3, "subsample": 1.0, "colsample_bytree": 0.9,
                "reg_alpha": 1e-8, "reg_lambda": 1e-8}),
            Configuration("lgbm_shallow", 80, {
                "n_estimators": 600, "learning_rate": 0.05, "num_leaves": 8,
                "min_child_samples": 20, "subsample": 0.7, "colsample_bytree": 0.5,
                "reg_alpha": 1e-8, "reg_lambda": 5.0}),
        ),
        "import lightgbm as lgb",
        "lgb.LGBMRegressor(**PARAMS, subsample_freq=1, random_state=0, verbose=-1)",
        "lgb.LGBMClassifier(**PARAMS, subsample_freq=1, random_state=0, verbose=-1)",
        lambda p, s: p["n_estimators"] * (
            (LGBM_FIT * s.learn + LGBM_SPLIT * p["num_leaves"]) * s.columns * p["colsample_bytree"]
            + LGBM_PREDICT * s.predict * math.log2(max(2, p["num_leaves"]))),
        "n_estimators", stops=True),
    Family(
        "extra_trees", "extremely randomised trees", (
            ("n_estimators", "int", 100, 400),
            ("max_features", "float", 0.2, 1.0),
            ("min_samples_leaf", "log_int", 1, 16),
        ), (
            Configuration("extra_trees", 30, {
                "n_estimators": 300, "max_features": 0.5, "min_samples_leaf": 1}),
        ),
        "from sklearn.ensemble import ExtraTreesClassifier, ExtraTreesRegressor",
        "ExtraTreesRegressor(**PARAMS, random_state=0)",
        "ExtraTreesClassifier(**PARAMS, random_state=0)",
        lambda p, s: p["n_estimators"] * _forest(EXTRA_FIT, p, s), "n_estimators"),
    Family(
        "random_forest", "random forest", (
            ("n_estimators", "int", 100, 400),
            ("max_features", "float", 0.2, 1.0),
            ("min_samples_leaf", "log_int", 1, 16),
        ), (
            Configuration("random_forest", 40, {
                "n_estimators": 300, "max_features": 0.5, "min_samples_leaf": 1}),
        ),
        "from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor",
        "RandomForestRegressor(**PARAMS, random_state=0)",
        "RandomForestClassifier(**PARAMS, random_state=0)",
        lambda p, s: p["n_estimators"] * _forest(FOREST_FIT, p, s), "n_estimators"),
    Family(
        "hist_gb", "scikit-learn histogram gradient boosting", (
            ("max_iter", "log_int", 50, 600),
            ("learning_rate", "log_float", 0.01, 0.3),
            ("max_leaf_nodes", "log_int", 4, 128),
            ("min_samples_leaf", "log_int", 2, 60),
            ("l2_regularization", "log_float", 1e-8, 10.0),
        ), (
            Configuration("hist_gb", 60, {
                "max_iter": 200, "learning_rate": 0.1, "max_leaf_nodes": 31,
                "min_samples_leaf": 20, "l2_regularization": 1e-8}),
        ),
        "from sklearn.ensemble import HistGradientBoostingClassifier, "
        "HistGradientBoostingRegressor",
        "HistGradientBoostingRegressor(**PARAMS, random_state=0)",
        "HistGradientBoostingClassifier(**PARAMS, random_state=0)",
        lambda p, s: p["max_iter"] * (HIST_FIT * s.learn * s.columns + HIST_PREDICT * s.predict),
        "max_iter", stops=True),
    Family(
        "catboost", "CatBoost gradient boosting (text columns as its categorical features)", (
            # AutoGluon's CatBoost space widened (depth 5-8, learning rate 0.005-0.2, L2 1-5);
            # depth to 8, not CatBoost's guide's 10: 1000 trees of depth 10 took 25 s a fold on
            # concrete. No early stopping in a harness fit, so the number of trees is searched.
            ("iterations", "log_int", 200, 1000),
            ("learning_rate", "log_float", 0.01, 0.3),
            ("depth", "int", 4, 8),
            ("l2_leaf_reg", "log_float", 1.0, 10.0),
        ), (
            # CatBoost's defaults, fewer and faster trees. 5-fold CV, one thread: concrete RMSE
            # 3.93 in 5-6 s, credit-g AUC 0.798 in 5-6 s; lgbm_small_lr 4.13 (2 s), 0.792 (2-4 s)
            Configuration("catboost", 65, {
                "iterations": 500, "learning_rate": 0.08, "depth": 6, "l2_leaf_reg": 3.0}),
        ),
        # thread_count: LightGBM's n_jobs=None (physical cores, capped by the sandbox's
        # LOKY_MAX_CPU_COUNT); no files (catboost_info/) in the candidate's folder.
        "import joblib\nfrom catboost import CatBoostClassifier, CatBoostRegressor",
        "CatBoostRegressor(**PARAMS, thread_count=joblib.cpu_count(only_physical_cores=True), "
        "random_state=0, verbose=False, allow_writing_files=False)",
        "CatBoostClassifier(**PARAMS, thread_count=joblib.cpu_count(only_physical_cores=True), "
        "random_state=0, verbose=False, allow_writing_files=False)",
        lambda p, s: p["iterations"] * p["depth"] * (
            CATBOOST_FIT * s.learn * s.columns + CATBOOST_PREDICT * s.predict),
        "iterations", stops=True),
    Family(
        "linear", "a linear model (ridge / logistic regression) on standardised features", (
            ("alpha", "log_float", 1e-3, 1e3),
        ), (
            Configuration("linear", 10, {"alpha": 1.0}),
        ),
        "from sklearn.linear_model import LogisticRegression, Ridge\n" + _SCALED,
        "make_pipeline(StandardScaler(), Ridge(alpha=PARAMS['alpha']))",
        "make_pipeline(StandardScaler(), LogisticRegression(C=1.0 / PARAMS['alpha'], "
        "max_iter=2000))",
        lambda p, s: LINEAR_FIT * s.learn * s.columns),
    Family(
        "knn", "k nearest neighbours on standardised features", (
            ("n_neighbors", "log_int", 2, 64),
            ("weights", "categorical", ("uniform", "distance"), None),
        ), (
            Configuration("knn", 20, {"n_neighbors": 10, "weights": "distance"}),
        ),
        "from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor\n" + _SCALED,
        # Encoded.fit lowers n_neighbors to the training rows' count.
        "make_pipeline(StandardScaler(), KNeighborsRegressor(**PARAMS))",
        "make_pipeline(StandardScaler(), KNeighborsClassifier(**PARAMS))",
        lambda p, s: KNN_PREDICT * s.learn * s.predict * s.columns),
)}

# Every family's entries by place, cheapest first: (name, family, params). The baseline root
# (BASELINE below) runs before all of them.
PORTFOLIO: tuple[tuple[str, str, dict[str, Any]], ...] = tuple(
    (c.name, f.name, c.params) for f, c in sorted(
        ((f, c) for f in FAMILIES.values() for c in f.portfolio), key=lambda fc: fc[1].place))


def _modules(imports: str) -> list[str]:
    """The modules import lines name."""
    found: list[str] = []
    for statement in ast.parse(imports).body:
        if isinstance(statement, ast.Import):
            found += [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.module:
            found.append(statement.module)
    return found


# What an executor's warm session imports once for the floor's runs (sandbox.WarmRunner): the
# harness's modules and every family's, so that a trial on small data costs its fits, not the
# 1.9 s of importing them afresh.
WARM_MODULES: tuple[str, ...] = tuple(dict.fromkeys(
    ["numpy", "pandas", "inspect", "json", "pickle", "datetime", "math"]
    + [m for f in FAMILIES.values() for m in _modules(f.imports)]))


# The baseline root (operators/harness.py baseline_code: LightGBM with its defaults) as a
# configuration of a family: its params a point of that space (LightGBM's defaults; its zero
# regularisation is the space's floor).
BASELINE_FAMILY = "lgbm"
BASELINE_PARAMS: dict[str, Any] = {
    "n_estimators": 100, "learning_rate": 0.1, "num_leaves": 31, "min_child_samples": 20,
    "subsample": 1.0, "colsample_bytree": 1.0, "reg_alpha": 1e-8, "reg_lambda": 1e-8,
}


@dataclass(frozen=True, slots=True)
class Scale:
    """What a run's floor nodes cost: their Size, and the most seconds one may take."""
    size: Size
    seconds: float

    @classmethod
    def of(cls, size: Size, budget: float, executors: int, timeout: float) -> Scale:
        """A node may take a FLOOR_NODES-th of the executors' budget, and `timeout` at most."""
        return cls(size, min(timeout, budget * max(1, executors) / FLOOR_NODES))


# Issue 75 asks for at least 20 floor nodes in a budget on a million rows: a node may take at
# most this share of the executors' time (Scale.of).
FLOOR_NODES = 20


# A sandboxed run's start (interpreter, imports, writing its inputs) and reading its CSVs, on
# one core. Measured with benchmarks.fit_cost: benchmarks/results/big-data-2026-12-06. A warm
# run starts in about 0.05 s, so its estimate is about a second high: it errs on the safe side.
START_SECONDS = 1.2
READ_SECONDS_PER_CELL = 2.0e-7
# A configuration sized down keeps at least this share of its trees, or is not run.
MIN_TREES_SHARE = 0.2
# Gradient boosting on this many learning rows or more stops early on a held-back share of
# them, after this many trees without a gain there (AutoGluon's boosters stop early on their
# validation rows): on the million-row table every LightGBM trial of 140 to 600 trees stopped
# short of its best, which fell at 355 to 1,788 trees (benchmarks/results/big-data-2026-12-08).
EARLY_STOP_ROWS, EARLY_STOP_SHARE, EARLY_STOP_ROUNDS = 20_000, 0.1, 50
# A family that stops early there has its trees raised to what this share of a node's share
# affords, at most STOPPED_TREES: the search has about half the budget's executor time on a
# large table (the rest is kept for the answer's refit), and raised to the whole share the
# 1 M-row run fitted 18 floor trials where issue 75 asks for 20.
RAISED_SHARE, STOPPED_TREES = 0.5, 2_000


def node_seconds(family: str, params: Mapping[str, Any], size: Size) -> float:
    """The estimated seconds of a node of `family` with `params` at `size`, on one core."""
    return (START_SECONDS + READ_SECONDS_PER_CELL * (size.learn + size.predict) * size.columns
            + size.fits * FAMILIES[family].cost(params, size))


def sized(family: str, params: Mapping[str, Any], scale: Scale | None) -> dict[str, Any] | None:
    """`params` where their node fits in `scale.seconds`; else with as many trees as fit (at
    least MIN_TREES_SHARE of them); None where even that does not fit. A family that stops
    early at `scale` (`Family.stops`, EARLY_STOP_ROWS) that fits gets as many trees as fit in
    RAISED_SHARE of it, up to STOPPED_TREES: its fit stops where more trees stop gaining."""
    record = FAMILIES[family]
    trees = record.trees
    if scale is None:
        return dict(params)
    if node_seconds(family, params, scale.size) <= scale.seconds:
        if (trees is None or not record.stops or scale.size.learn < EARLY_STOP_ROWS
                or params[trees] >= STOPPED_TREES):
            return dict(params)
        raised = _trees_fitting(family, {**params, trees: STOPPED_TREES},
                                replace(scale, seconds=RAISED_SHARE * scale.seconds))
        return {**params, trees: max(params[trees], min(STOPPED_TREES, raised))}
    if trees is None:
        return None
    fitting = _trees_fitting(family, params, scale)
    if fitting < MIN_TREES_SHARE * params[trees]:
        return None
    return {**params, trees: fitting}


def _trees_fitting(family: str, params: Mapping[str, Any], scale: Scale) -> int:
    """How many trees of `params` (which have some) fit in `scale.seconds`."""
    trees = FAMILIES[family].trees
    assert trees is not None
    fixed = node_seconds(family, {**params, trees: 0}, scale.size)
    per_tree = (node_seconds(family, params, scale.size) - fixed) / params[trees]
    return math.floor((scale.seconds - fixed) / per_tree)


def affordable_space(family: str, scale: Scale | None) -> tuple[Dimension, ...]:
    """`family`'s space, its trees' upper end lowered to what `scale` affords with its first
    portfolio configuration's other values (never below the lower end: a trial there is
    sized down or dropped by `sized`)."""
    record = FAMILIES[family]
    if scale is None or record.trees is None:
        return record.space
    typical = record.portfolio[0].params
    space = []
    for name, kind, low, high in record.space:
        if name == record.trees:
            fitting = sized(family, {**typical, name: high}, scale)
            high = max(low, fitting[name]) if fitting is not None else low
        space.append((name, kind, low, high))
    return tuple(space)


def affordable(family: str, scale: Scale | None) -> bool:
    """Whether `family`'s first portfolio configuration runs at `scale`, sized down or not."""
    return sized(family, FAMILIES[family].portfolio[0].params, scale) is not None
