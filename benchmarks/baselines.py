"""Non-LLM baselines: what a practitioner runs instead of the engine, each as they would write it.

- `lgbm`: LightGBM with default settings.
- `optuna`: LightGBM tuned by Optuna (TPE, seeded) with 5-fold cross-validation for a wall-clock
  budget, the defaults enqueued as the first trial; the best trial's settings are refitted on
  all the rows.
- `autogluon`: `TabularPredictor(label, eval_metric, problem_type, path)` and
  `.fit(rows, time_limit=budget, presets="best_quality")` (`pip install -e '.[bench]'`).
- `flaml`: `AutoML().fit(X, y, task, time_budget=budget, metric)` (the same extra).

The fairness rule: every baseline learns from the same rows, everything but the test split (the
engine's train + valid, labels included), within the same wall-clock budget on all the machine's
cores, and writes the same submission CSV that `engine.evaluation.scoring.score` reads against the
hidden test labels; probabilities go in as `proba_<label>` columns, so the scorer matches them to
labels by name whatever order a library keeps its classes in. `lgbm` and `optuna` fit the
features of the harness's own `prepare()` (its source is run here, not copied), as the engine's
LightGBM root does; AutoGluon and FLAML take the raw frames, as a user hands them over. `seconds`
is each one's real wall time, measured by the runner around the whole call (fit, predict,
score): a library that overruns its budget shows it.
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from common.errors import UserError
from common.metric import label_str
from engine.evaluation.folds import fold_splitter
from engine.evaluation.scoring import score
from engine.task.prepare import PreparedTask
from operators.prepare_source import PREPARE_SOURCE
from search.node import PROBA_PREFIX

Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]
REG_FLOOR = 1e-8  # the L1/L2 terms' log-scale floor; a value there means none (their default)
DEFAULT_PARAMS: dict[str, Any] = {
    "n_estimators": 100, "learning_rate": 0.1, "num_leaves": 31, "min_child_samples": 20,
    "subsample": 1.0, "colsample_bytree": 1.0, "reg_alpha": REG_FLOOR, "reg_lambda": REG_FLOOR,
}  # LightGBM's defaults, so the first trial is exactly the `lgbm` baseline
CV_FOLDS = 5  # the k of the optuna baseline's k-fold cross-validation

# The engine's metric -> the name each peer library gives it. A peer optimises its own
# implementation; only the test score, from the engine's scorer, is compared. FLAML has no
# weighted F1, so it gets one as a custom metric (`_flaml_f1_weighted`).
PEER_METRICS: dict[str, dict[str, str]] = {
    "autogluon": {"f1": "f1", "f1_weighted": "f1_weighted", "roc_auc": "roc_auc",
                  "log_loss": "log_loss", "rmse": "root_mean_squared_error"},
    "flaml": {"f1": "f1", "f1_weighted": "f1_weighted", "roc_auc": "roc_auc",
              "log_loss": "log_loss", "rmse": "rmse"},
}
# FLAML minimises 1 - score for these metrics and the value itself for the others.
_FLAML_ONE_MINUS = frozenset({"f1", "f1_weighted", "roc_auc"})


@dataclass
class BaselineResult:
    valid: float | None  # the method's own estimate of its score (optuna: cross-validation;
    # AutoGluon, FLAML: their internal validation), raw metric; None where there is none
    test: float  # raw metric on the hidden test labels, by the engine's scorer
    params: dict[str, Any]
    seconds: float  # wall time, fit and predict (the runner records its own, around the call)
    fits: int  # configurations tried
    curve: list[tuple[float, float]] = field(default_factory=list)  # (seconds, valid raw)


Baseline = Callable[[PreparedTask, float, int, Path], BaselineResult]


def _extra(module: str) -> Any:
    """A peer library, imported when first used; its absence names the extra to install."""
    try:
        return import_module(module)
    except ImportError as exc:
        raise UserError(f"{module} is not installed: pip install -e '.[bench]' (the benchmark "
                        f"extra with AutoGluon and FLAML); {exc}") from exc


# ---- the rows every method learns from ---------------------------------------------------


def learning_rows(task: PreparedTask) -> tuple[pd.DataFrame, pd.Series]:
    """Everything but the test split: train and valid rows with their labels, features raw."""
    X = pd.concat([task.train.drop(columns=[task.target]), task.valid_X], ignore_index=True)
    y = pd.concat([task.train[task.target], task.valid_y], ignore_index=True)
    return X, y.rename(task.target)


def prepare_features(task: PreparedTask) -> Frames:
    """The three feature frames a candidate gets after `prepare(X, X_valid, X_test)`."""
    namespace: dict[str, Any] = {"pd": pd, "np": np, "re": re}
    exec(compile(PREPARE_SOURCE, "<harness prepare>", "exec"), namespace)
    prepare: Callable[..., Frames] = namespace["prepare"]
    return prepare(task.train.drop(columns=[task.target]), task.valid_X, task.test_X)


def prepared_rows(task: PreparedTask) -> tuple[pd.DataFrame, pd.Series, pd.DataFrame]:
    """`learning_rows` as `prepare()`'s numeric features (fitted as a candidate's are), and the
    test features."""
    X, X_valid, X_test = prepare_features(task)
    _, y = learning_rows(task)
    return pd.concat([X, X_valid], ignore_index=True), y, X_test


# ---- predictions into the scorer ---------------------------------------------------------


def submission(task: PreparedTask, prediction: Any, proba: pd.DataFrame | None) -> bytes:
    """The CSV a candidate would write: `prediction`, and `proba_<label>` per column of `proba`
    (columns named by the class values the library was given) when the metric needs them."""
    out = pd.DataFrame({"prediction": np.asarray(prediction)})
    if task.metric.needs_proba:
        if proba is None:
            raise ValueError(f"{task.metric.name} needs class probabilities")
        for label in proba.columns:
            out[f"{PROBA_PREFIX}{label_str(label)}"] = np.asarray(proba[label], dtype=float)
    buffer = io.StringIO()
    out.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


def _proba(model: Any, X: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(np.asarray(model.predict_proba(X)), columns=list(model.classes_))


def submission_csv(task: PreparedTask, model: Any, X: pd.DataFrame) -> bytes:
    """`submission` of a fitted scikit-learn-style model on rows `X`."""
    proba = _proba(model, X) if task.metric.needs_proba else None
    return submission(task, model.predict(X), proba)


def cv_score(task: PreparedTask, y: pd.Series, prediction: Any,
             proba: pd.DataFrame | None) -> float:
    """The engine's metric of predictions for labelled rows that are not a hidden split."""
    if proba is not None:  # a class missing from a fold's training rows gets probability 0
        proba = proba.rename(columns=label_str).reindex(columns=list(task.labels), fill_value=0.0)
    return task.metric.score(y, pd.Series(np.asarray(prediction)), proba, task.labels)


# ---- LightGBM ----------------------------------------------------------------------------


def lightgbm(task: PreparedTask, params: dict[str, Any], seed: int) -> Any:
    """An unfitted LightGBM model of the task's kind with `params` (LightGBM's defaults for the
    rest); all cores, as LightGBM uses by default."""
    import lightgbm as lgb

    kind = lgb.LGBMRegressor if task.task_type == "regression" else lgb.LGBMClassifier
    # LightGBM ignores subsample unless bagging runs every k iterations.
    extra: dict[str, Any] = {"subsample_freq": 1} if params.get("subsample", 1.0) < 1.0 else {}
    return kind(random_state=seed, verbose=-1, **params, **extra)


def lgbm_default(task: PreparedTask, budget: float, seed: int, folder: Path) -> BaselineResult:
    start = time.time()
    X, y, X_test = prepared_rows(task)
    model = lightgbm(task, {}, seed).fit(X, y)
    test = score(task, submission_csv(task, model, X_test), "test")
    return BaselineResult(None, test, {}, time.time() - start, 1)


def _folds(task: PreparedTask, y: pd.Series, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return list(fold_splitter(task.task_type, CV_FOLDS, seed).split(y, y))


def optuna_lgbm(task: PreparedTask, budget: float, seed: int, folder: Path) -> BaselineResult:
    """Tune by k-fold cross-validation until `budget` seconds have passed (a trial running at
    the deadline stops after its current fold; the default trial always completes), then refit
    the best settings on all the rows (that fit comes after the deadline and shows in the wall
    time)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.time()
    deadline = start + budget
    X, y, X_test = prepared_rows(task)
    folds = _folds(task, y, seed)
    curve: list[tuple[float, float]] = []
    best: dict[str, Any] = {}

    def objective(trial: optuna.Trial) -> float:
        params = {
            "n_estimators": trial.suggest_int("n_estimators", 50, 1000, log=True),
            "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
            "num_leaves": trial.suggest_int("num_leaves", 8, 256, log=True),
            "min_child_samples": trial.suggest_int("min_child_samples", 5, 100, log=True),
            "subsample": trial.suggest_float("subsample", 0.5, 1.0),
            "colsample_bytree": trial.suggest_float("colsample_bytree", 0.5, 1.0),
            "reg_alpha": trial.suggest_float("reg_alpha", REG_FLOOR, 10.0, log=True),
            "reg_lambda": trial.suggest_float("reg_lambda", REG_FLOOR, 10.0, log=True),
        }
        for name in ("reg_alpha", "reg_lambda"):
            params[name] = 0.0 if params[name] <= REG_FLOOR else params[name]
        scores = []
        for fit_rows, held_out in folds:
            if best and time.time() > deadline:  # a trial begun in time stops at the deadline
                raise optuna.TrialPruned()
            model = lightgbm(task, params, seed).fit(X.iloc[fit_rows], y.iloc[fit_rows])
            rows = X.iloc[held_out]
            proba = _proba(model, rows) if task.metric.needs_proba else None
            scores.append(cv_score(task, y.iloc[held_out], model.predict(rows), proba))
        cv = float(np.mean(scores))
        curve.append((time.time() - start, cv))
        value = task.metric.normalise(cv)
        if not best or value > best["value"]:  # ties keep the earlier trial
            best.update(value=value, cv=cv, params=params)
        return value

    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial(DEFAULT_PARAMS)
    study.optimize(objective, n_trials=1)  # the defaults, whatever the budget
    left = deadline - time.time()
    if left > 0:
        study.optimize(objective, timeout=left)
    model = lightgbm(task, best["params"], seed).fit(X, y)
    test = score(task, submission_csv(task, model, X_test), "test")
    return BaselineResult(best["cv"], test, best["params"], time.time() - start, len(curve),
                          curve)


# ---- peer AutoML libraries ---------------------------------------------------------------


def _peer_metric(peer: str, task: PreparedTask) -> str:
    names = PEER_METRICS[peer]
    if task.metric.name not in names:
        raise UserError(f"the {peer} baseline has no mapping for metric {task.metric.name}; "
                        f"use one of {', '.join(names)}")
    return names[task.metric.name]


def _value_of(labels: pd.Series, label: str) -> Any:
    """The class value (as the frame holds it: an int or a string) whose label is `label`."""
    return next(v for v in labels.unique() if label_str(v) == label)


def autogluon(task: PreparedTask, budget: float, seed: int, folder: Path) -> BaselineResult:
    """AutoGluon's best_quality preset on the raw rows, the predictor saved under `folder`.

    With the engine's Ray (newer than AutoGluon 1.6 supports) AutoGluon fits the bagging folds
    one after another instead of in Ray workers, as it does for any user with that Ray; each
    model still uses every core."""
    tabular = _extra("autogluon.tabular")
    start = time.time()
    X, y = learning_rows(task)
    rows = X.assign(**{task.target: y})
    positive = _value_of(y, task.positive_label) if task.positive_label is not None else None
    predictor = tabular.TabularPredictor(
        label=task.target, eval_metric=_peer_metric("autogluon", task),
        problem_type=task.task_type, path=str(folder / "autogluon"), verbosity=1,
        positive_class=positive)
    # The seed every bagged model starts from (AutoGluon's default is 0). Without a Ray it
    # supports, AutoGluon 1.6.3 runs best_quality's DyStack sub-fit in its own process; when
    # that sub-fit trains no model (a quarter of a short budget, a loaded machine) it raises,
    # leaves its learner marked fitted, and the main fit then fails ("Learner is already fit").
    # Not raising keeps the sub-fit's answer (no stacked overfitting found); the main fit's
    # emptiness is checked here instead.
    predictor.fit(rows, time_limit=budget, presets="best_quality",
                  ag_args_ensemble={"model_random_seed": seed}, raise_on_no_models_fitted=False)
    if not predictor.model_names():
        raise RuntimeError(f"AutoGluon trained no model in {budget:g} s: give it a longer budget")
    proba = predictor.predict_proba(task.test_X) if task.metric.needs_proba else None
    test = score(task, submission(task, predictor.predict(task.test_X), proba), "test")
    seconds = time.time() - start
    board = predictor.leaderboard(silent=True).set_index("model")
    best = predictor.model_best  # the model predict() used
    # score_val is on AutoGluon's higher-is-better scale (e.g. -log_loss).
    valid = float(predictor.eval_metric.convert_score_to_original(board.score_val[best]))
    # Scored: keep only what the answer needs (bagged stacks of every model run to GBs), quietly
    # (it logs a line per model it deletes).
    logger = logging.getLogger("autogluon")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        predictor.delete_models(models_to_keep="best", dry_run=False)
    finally:
        logger.setLevel(level)
    return BaselineResult(valid, test, {"best_model": str(best), "models": len(board)}, seconds,
                          len(board))


def _flaml_f1_weighted(X_val: Any, y_val: Any, estimator: Any, *args: Any,
                       **kwargs: Any) -> tuple[float, dict[str, float]]:
    """FLAML's custom-metric signature: (loss to minimise, metrics to log)."""
    from sklearn.metrics import f1_score

    value = float(f1_score(y_val, estimator.predict(X_val), average="weighted"))
    return 1.0 - value, {"f1_weighted": value}


def flaml(task: PreparedTask, budget: float, seed: int, folder: Path) -> BaselineResult:
    """FLAML's AutoML on the raw rows. A binary target goes in as 1 for the engine's positive
    class and 0 for the other, so FLAML's f1 is that class's F1."""
    automl_module = _extra("flaml.automl")
    start = time.time()
    X, y = learning_rows(task)
    classes: list[Any] = []
    if task.positive_label is not None:
        classes = [_value_of(y, label) for label in task.labels if label != task.positive_label]
        classes.append(_value_of(y, task.positive_label))
        y = (y.map(label_str) == task.positive_label).astype(int)
    name = _peer_metric("flaml", task)
    automl = automl_module.AutoML()
    automl.fit(X, y, task="regression" if task.task_type == "regression" else "classification",
               time_budget=budget, metric=_flaml_f1_weighted if name == "f1_weighted" else name,
               seed=seed, n_jobs=-1, verbose=0, log_file_name=str(folder / "flaml.log"))
    prediction = np.asarray(automl.predict(task.test_X))
    proba = _proba(automl, task.test_X) if task.metric.needs_proba else None
    if classes:  # back from 0/1 to the task's labels
        prediction = np.asarray(classes, dtype=object)[prediction.astype(int)]
        if proba is not None:
            proba.columns = [classes[int(c)] for c in proba.columns]
    test = score(task, submission(task, prediction, proba), "test")
    seconds = time.time() - start
    raw = (lambda loss: 1.0 - loss) if name in _FLAML_ONE_MINUS else (lambda loss: loss)
    # The log has a line per improvement: (seconds, validation loss) of each new best.
    lines = (json.loads(line) for line in (folder / "flaml.log").read_text().splitlines())
    curve = [(float(r["wall_clock_time"]), raw(float(r["validation_loss"]))) for r in lines
             if "validation_loss" in r]
    # FLAML has no public count of the trials it ran; its per-learner counter is the one.
    trials = int(sum(getattr(automl, "_iter_per_learner", {}).values()))
    return BaselineResult(raw(float(automl.best_loss)), test,
                          {"best_estimator": str(automl.best_estimator),
                           "best_config": automl.best_config}, seconds, trials, curve)


BASELINES: dict[str, Baseline] = {
    "lgbm": lgbm_default,
    "optuna": optuna_lgbm,
    "autogluon": autogluon,
    "flaml": flaml,
}
