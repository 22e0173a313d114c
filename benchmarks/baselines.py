"""Non-LLM baselines on the engine's own splits and scorer: what a practitioner runs instead.

- `lgbm`: LightGBM with default settings (the engine's baseline root, fitted here in-process).
- `optuna`: LightGBM tuned by Optuna (TPE, seeded) on the valid split for a wall-clock budget,
  the defaults enqueued as the first trial; the trial with the best valid score is reported.

Both fit on the train split only, like every candidate, on the features of the harness's own
`prepare()` (its source is run here, not copied), and both are scored by `engine.scoring.score`
on the task's hidden valid and test labels.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from engine.scoring import score
from engine.task import PreparedTask
from operators.harness import PREPARE_SOURCE
from search.metric import label_str

Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]
REG_FLOOR = 1e-8  # the L1/L2 terms' log-scale floor; a value there means none (their default)
DEFAULT_PARAMS: dict[str, Any] = {
    "n_estimators": 100, "learning_rate": 0.1, "num_leaves": 31, "min_child_samples": 20,
    "subsample": 1.0, "colsample_bytree": 1.0, "reg_alpha": REG_FLOOR, "reg_lambda": REG_FLOOR,
}  # LightGBM's defaults, so the first trial is exactly the `lgbm` baseline


@dataclass
class BaselineResult:
    valid: float  # raw metric on the valid split
    test: float  # raw metric on the test split (reported only)
    params: dict[str, Any]
    seconds: float
    fits: int
    curve: list[tuple[float, float]] = field(default_factory=list)  # (seconds, valid raw)


def prepare_features(task: PreparedTask) -> Frames:
    """The three feature frames a candidate gets after `prepare(X, X_valid, X_test)`."""
    namespace: dict[str, Any] = {"pd": pd, "np": np, "re": re}
    exec(compile(PREPARE_SOURCE, "<harness prepare>", "exec"), namespace)
    prepare: Callable[..., Frames] = namespace["prepare"]
    return prepare(task.train.drop(columns=[task.target]), task.valid_X, task.test_X)


def _model(task: PreparedTask, params: dict[str, Any], seed: int) -> Any:
    import lightgbm as lgb

    kind = lgb.LGBMRegressor if task.task_type == "regression" else lgb.LGBMClassifier
    # LightGBM ignores subsample unless bagging runs every k iterations.
    extra: dict[str, Any] = {"subsample_freq": 1} if params.get("subsample", 1.0) < 1.0 else {}
    return kind(random_state=seed, verbose=-1, **params, **extra)


def submission_csv(task: PreparedTask, model: Any, X: pd.DataFrame) -> bytes:
    """The CSV a candidate would write for these rows, so the same scorer reads it."""
    out = pd.DataFrame({"prediction": model.predict(X)})
    if task.metric.needs_proba:
        proba = np.asarray(model.predict_proba(X))
        for i, label in enumerate(model.classes_):
            out[f"proba_{label_str(label)}"] = proba[:, i]
    buffer = io.StringIO()
    out.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


def _fit(task: PreparedTask, frames: Frames, params: dict[str, Any], seed: int) -> Any:
    X, _, _ = frames
    model = _model(task, params, seed)
    model.fit(X, task.train[task.target])
    return model


def lgbm_default(task: PreparedTask, seed: int = 0) -> BaselineResult:
    start = time.time()
    frames = prepare_features(task)
    model = _fit(task, frames, {}, seed)
    valid = score(task, submission_csv(task, model, frames[1]), "valid")
    test = score(task, submission_csv(task, model, frames[2]), "test")
    seconds = time.time() - start
    return BaselineResult(valid, test, {}, seconds, 1, [(seconds, valid)])


def optuna_lgbm(task: PreparedTask, budget: float, seed: int = 0) -> BaselineResult:
    """Tune on the valid split until `budget` seconds have passed (a fit running at the
    deadline finishes); at least the default trial always completes."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.time()
    frames = prepare_features(task)
    curve: list[tuple[float, float]] = []
    best: dict[str, Any] = {}  # only the best model is kept: hundreds would not fit in memory

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
        model = _fit(task, frames, params, seed)
        valid = score(task, submission_csv(task, model, frames[1]), "valid")
        curve.append((time.time() - start, valid))
        value = task.metric.normalise(valid)
        if not best or value > best["value"]:  # ties keep the earlier trial
            best.update(value=value, valid=valid, model=model, params=params)
        return value

    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial(DEFAULT_PARAMS)
    study.optimize(objective, n_trials=1)  # the defaults, whatever the budget
    left = budget - (time.time() - start)
    if left > 0:
        study.optimize(objective, timeout=left)
    test = score(task, submission_csv(task, best["model"], frames[2]), "test")
    return BaselineResult(best["valid"], test, best["params"], time.time() - start, len(curve),
                          curve)


BASELINES: dict[str, Callable[[PreparedTask, float, int], BaselineResult]] = {
    "lgbm": lambda task, budget, seed: lgbm_default(task, seed),
    "optuna": optuna_lgbm,
}
