"""Each benchmark baseline runs its real library on tiny data with a tiny budget, through the
runner's own call, and is scored by the engine's scorer. AutoGluon and FLAML need the bench extra
(`-m bench`, their own CI step); LightGBM and Optuna run in the default suite."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.baselines import BASELINES, BaselineResult, submission
from engine.evaluation.scoring import score
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task

PEER = [pytest.mark.slow, pytest.mark.bench]
# Seconds per fit. CI runs this suite beside the cluster and vLLM suites on 2 cores, where every
# fit is several times slower than alone. AutoGluon's time goes mostly to its fixed costs
# (best_quality's DyStack sub-fit in its own process takes a quarter first, then about 0.5 s a
# bagging fold before a tree is grown): 30 s trains a model alone, and trained none on 2 of 4
# tasks in the CI run of stop 55. A fit that trains nothing is given AUTOGLUON_RETRY times the
# budget once, as its error asks (see _run). FLAML's 10 s: at 5 s it made 2 fits of tiny
# LightGBMs in that run (log loss 0.88).
BUDGET = {"lgbm": 1.0, "optuna": 2.0, "autogluon": 30.0, "flaml": 10.0}
AUTOGLUON_RETRY = 3


def _data(path: Path, kind: str, rows: int = 240) -> Path:
    """Learnable synthetic rows with a text column and missing values. Binary labels are
    'true' and 'zzz': the engine's positive class ('true', the one that reads as positive) is
    not the last in sorted order, so a library that keeps its own class order and a column
    matched to the wrong label would score an AUC far below 0.5."""
    rng = np.random.default_rng(0)
    x1, x2 = rng.normal(size=rows), rng.normal(size=rows)
    colour = rng.choice(["red", "green", "blue"], size=rows)
    signal = x1 + 0.5 * x2 + (colour == "red") + rng.normal(scale=0.3, size=rows)
    if kind == "binary":
        target: object = np.where(signal > 0.3, "true", "zzz")
    elif kind == "multiclass":
        target = np.select([signal < -0.5, signal < 0.7], ["low", "mid"], "high")
    else:
        target = 10 * signal + 50
    x2[::17] = np.nan
    pd.DataFrame({"x1": x1, "x2": x2, "colour": colour, "y": target}).to_csv(path, index=False)
    return path


def _task(tmp_path: Path, kind: str, metric: str) -> PreparedTask:
    return prepare_task(TaskSpec(_data(tmp_path / f"{kind}.csv", kind), "y", metric=metric))


def _fit(name: str, task: PreparedTask, budget: float, folder: Path) -> BaselineResult:
    folder.mkdir(parents=True, exist_ok=True)
    result = BASELINES[name](task, budget, 0, folder)
    assert math.isfinite(result.test) and result.fits >= 1 and result.seconds > 0
    assert result.valid is None or math.isfinite(result.valid)
    return result


def _run(name: str, task: PreparedTask, folder: Path) -> tuple[BaselineResult, float]:
    """The baseline's result at its BUDGET, and the budget it was given. AutoGluon that trained
    no model (a loaded machine: the error says to give it longer) is given AUTOGLUON_RETRY times
    as long once, in a fresh folder; a second failure fails the test."""
    budget = BUDGET[name]
    try:
        return _fit(name, task, budget, folder), budget
    except RuntimeError as exc:
        if name != "autogluon" or "trained no model" not in str(exc):
            raise
    shutil.rmtree(folder)
    budget *= AUTOGLUON_RETRY
    return _fit(name, task, budget, folder), budget


@pytest.mark.parametrize("name", [
    "lgbm", "optuna", pytest.param("autogluon", marks=PEER), pytest.param("flaml", marks=PEER),
])
def test_each_baseline_scores_probabilities_under_the_right_labels(name: str,
                                                                   tmp_path: Path) -> None:
    task = _task(tmp_path, "binary", "roc_auc")
    assert task.positive_label == "true" and task.labels == ("true", "zzz")
    result, budget = _run(name, task, tmp_path / name)
    assert result.test > 0.85, f"{name}: AUC {result.test}: probabilities of the wrong class?"
    if name != "lgbm":  # its own estimate of the same thing: an AUC, not a loss
        assert result.valid is not None and 0.5 < result.valid <= 1.0
    # A library that overruns its budget shows it; none may take many times as long.
    assert result.seconds < 4 * budget + 30


@pytest.mark.parametrize("name", [
    "optuna", pytest.param("autogluon", marks=PEER), pytest.param("flaml", marks=PEER),
])
@pytest.mark.parametrize("kind, metric", [
    ("binary", "f1"), ("multiclass", "f1_weighted"), ("multiclass", "log_loss"),
    ("regression", "rmse"),
])
def test_each_baseline_optimises_every_protocol_metric(name: str, kind: str, metric: str,
                                                      tmp_path: Path) -> None:
    task = _task(tmp_path, kind, metric)
    lgbm, _ = _run("lgbm", task, tmp_path / "lgbm")
    result, _ = _run(name, task, tmp_path / name)
    # Learnable data: far from chance (predicting the mean scores the std), and in the same
    # league as LightGBM's defaults.
    if metric == "rmse":
        assert result.test < 0.75 * float(task.test_y.std()) and result.test < 2 * lgbm.test
    elif metric == "log_loss":
        assert result.test < 0.8 and result.test < 2 * lgbm.test  # chance: ln 3 = 1.1
    else:  # chance is about 0.33 (three classes) or 0.5; FLAML beside the vLLM suite reached
        # 0.67 in its 5 s (8 fits, best an SGD), still far from it
        assert result.test > 0.6 and result.test > lgbm.test - 0.15
    if name == "autogluon":  # the predictor it answered with stays under the run folder
        from autogluon.tabular import TabularPredictor

        predictor = TabularPredictor.load(str(tmp_path / name / "autogluon"), verbosity=0)
        assert predictor.model_best == result.params["best_model"]
        assert predictor.problem_type == task.task_type


@pytest.mark.slow
@pytest.mark.bench
def test_autogluon_answers_when_its_dystack_sub_fit_trains_nothing(tmp_path: Path) -> None:
    """best_quality spends a quarter of the budget on a DyStack sub-fit. With 5 s on this task
    (the CI machine, or any loaded one) the sub-fit trains no model; AutoGluon 1.6.3 without a
    Ray it supports then failed the main fit ("Learner is already fit", an AssertionError), as
    it did in CI at 4 s of 20 beside the vLLM suite. Now it answers, or, when the main fit
    trains nothing too, says so in one line.

    How good the answer is depends on how loaded the machine is (CI beside the vLLM suite: f1
    0.48 from 3 starved models), so this checks that it answers from what it learnt, better
    than always naming the commonest class; the protocol test above holds the quality bar."""
    task = _task(tmp_path, "multiclass", "f1_weighted")
    try:
        result = _fit("autogluon", task, 5.0, tmp_path / "autogluon")
    except RuntimeError as exc:  # a loaded machine: the main fit trained nothing either
        assert "AutoGluon trained no model in 5 s" in str(exc)
        return
    commonest = task.test_y.mode()[0]
    chance = score(task, submission(task, np.full(len(task.test_y), commonest), None), "test")
    assert result.params["models"] >= 1 and result.test > chance + 0.1, (result, chance)


@pytest.mark.slow
@pytest.mark.bench
def test_autogluon_fits_its_xgboost_models(tmp_path: Path) -> None:
    """A peer at full strength: under xgboost-cpu 2.1 with scikit-learn 1.9 every XGBoost model
    failed to save and AutoGluon skipped them all, weaker than the AutoGluon users run."""
    from autogluon.tabular import TabularPredictor

    task = _task(tmp_path, "regression", "rmse")
    predictor = TabularPredictor(label="y", path=str(tmp_path / "ag"), verbosity=0)
    predictor.fit(task.train, hyperparameters={"XGB": {}}, time_limit=60)
    assert any(name.startswith("XGBoost") for name in predictor.model_names())
