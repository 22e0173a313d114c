"""The answer's saved model (engine/deploy/saved_model.py, operators/fitted.py): fitted once, then
new rows predicted in the real sandbox with every fit restored, never trained again."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.deploy.saved_model import (
    FittedAnswer,
    fit_answer,
    keep,
    replay_inputs,
    saved_states,
    training_inputs,
)
from engine.evaluation.folds import Folds, make_folds
from engine.evaluation.select import one_at_a_time
from engine.search_run import task_context
from engine.task.prepare import PreparedTask, TaskSpec, csv_bytes, prepare_task
from operators.fitted import LOAD, SAVE, fitted_wrapper
from operators.harness import assemble
from sandbox import Limits, run_script
from tests.helpers import make_data

LIMITS = Limits(wall_seconds=120)
# No random_state: two fits differ, so equal predictions can only come from restored fits.
UNSEEDED = (
    "from sklearn.ensemble import RandomForestRegressor\n\n\n"
    "def fit_predict(X, y, X_valid, X_test):\n"
    "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
    "    model = RandomForestRegressor(n_estimators=10).fit(X, y)\n"
    "    return model.predict(X_valid), model.predict(X_test)\n"
)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    tmp = tmp_path_factory.mktemp("fitted")
    make_data(tmp / "d.csv", rows=200)
    return prepare_task(TaskSpec(data=tmp / "d.csv", target="y"))


def save_answer(best: Path, task: PreparedTask, node_id: str, code: str,
                folds: Folds | None) -> dict[str, Any]:
    fitted: FittedAnswer = fit_answer(task, node_id, code, folds, one_at_a_time(run_script),
                                       LIMITS)
    keep(best, fitted)
    return fitted.record


def solution(task: PreparedTask, model: str) -> str:
    return assemble(task_context(task, 0), model)


def predict_rows(task: PreparedTask, code: str, trains: list[bytes], states: list[bytes],
                 rows: pd.DataFrame) -> list[np.ndarray]:
    """Each saved model's predictions of `rows`, from one load run."""
    result = run_script(fitted_wrapper(LOAD), replay_inputs(trains, code, states,
                                                            csv_bytes(rows)), LIMITS)
    assert result.status == "ok", result.stderr_tail
    assert result.valid_csv is not None
    stacked = pd.read_csv(io.BytesIO(result.valid_csv))
    assert sorted(set(stacked["fold"])) == list(range(len(states)))
    return [block["prediction"].to_numpy() for _, block in stacked.groupby("fold")]


def test_saved_fits_predict_new_rows_without_training(task: PreparedTask,
                                                      tmp_path: Path) -> None:
    code = solution(task, UNSEEDED)
    (tmp_path / "node.json").write_text(json.dumps({"node_id": "n1"}))
    record = save_answer(tmp_path, task, "n1", code, None)
    assert record["saved"] is True and record["models"] == 1, record
    assert record["training"] == "every train + valid row" and record["form"] == "replay"
    states = saved_states(tmp_path)
    assert states is not None and len(states) == 1
    (training,) = training_inputs(task, None)
    rows = task.test_X
    (everything,) = predict_rows(task, code, [training["train.csv"]], states, rows)
    # The same fits whatever else is predicted with them: the features come from the
    # training rows alone (an inductive prepare()), and nothing is refitted.
    (head,) = predict_rows(task, code, [training["train.csv"]], states, rows.head(5))
    assert np.array_equal(head, everything[:5])
    retrained = run_script(code, {**training, "valid.csv": csv_bytes(rows),
                                  "test.csv": csv_bytes(rows)}, LIMITS)
    assert retrained.valid_csv is not None
    again = pd.read_csv(io.BytesIO(retrained.valid_csv))["prediction"].to_numpy()
    assert not np.allclose(again, everything)  # a real fit of this model differs every time


def test_a_k_fold_answer_saves_one_model_per_fold(task: PreparedTask, tmp_path: Path) -> None:
    folds = make_folds(task, 3)
    (tmp_path / "node.json").write_text(json.dumps({"node_id": "n2"}))
    record = save_answer(tmp_path, task, "n2", solution(task, UNSEEDED), folds)
    assert record["saved"] is True and record["models"] == 3
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [
        "fold-0.pkl", "fold-1.pkl", "fold-2.pkl", "model.json"]
    states = saved_states(tmp_path)
    assert states is not None
    trains = [inputs["train.csv"] for inputs in training_inputs(task, folds)]
    # One load run replays the three fold models; each predicts as its own replay does.
    together = predict_rows(task, solution(task, UNSEEDED), trains, states, task.test_X)
    alone = predict_rows(task, solution(task, UNSEEDED), trains[1:2], states[1:2], task.test_X)
    assert np.array_equal(together[1], alone[0])
    assert not np.allclose(together[0], together[1])  # three models, learned from other rows
    # A best/ that moved on to another node has no saved model.
    (tmp_path / "node.json").write_text(json.dumps({"node_id": "other"}))
    assert saved_states(tmp_path) is None


def test_a_random_step_outside_the_fits_is_not_saved(task: PreparedTask,
                                                     tmp_path: Path) -> None:
    noisy = UNSEEDED.replace("return model.predict(X_valid), model.predict(X_test)",
                             "noise = np.random.rand(len(X_test))\n"
                             "    return model.predict(X_valid), model.predict(X_test) + noise")
    record = save_answer(tmp_path, task, "n3", solution(task, noisy), None)
    assert record["saved"] is False
    assert "changed its test predictions" in record["reason"]
    assert not (tmp_path / "model").exists()


def test_a_fit_that_does_not_pickle_is_not_saved(task: PreparedTask, tmp_path: Path) -> None:
    lambda_step = (
        "from sklearn.linear_model import Ridge\n"
        "from sklearn.pipeline import make_pipeline\n"
        "from sklearn.preprocessing import FunctionTransformer\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
        "    model = make_pipeline(FunctionTransformer(lambda v: v * 2), Ridge()).fit(X, y)\n"
        "    return model.predict(X_valid), model.predict(X_test)\n"
    )
    record = save_answer(tmp_path, task, "n4", solution(task, lambda_step), None)
    assert record["saved"] is False and "Pipeline" in record["reason"], record
    assert not (tmp_path / "model").exists()


def test_fits_saved_from_another_solution_are_refused(task: PreparedTask) -> None:
    (training,) = training_inputs(task, None)
    code = solution(task, UNSEEDED)
    saved = run_script(fitted_wrapper(SAVE), {**training, "solution.py": code.encode()}, LIMITS)
    assert saved.status == "ok" and saved.fitted is not None
    other = solution(task, UNSEEDED.replace("RandomForestRegressor", "ExtraTreesRegressor"))
    result = run_script(fitted_wrapper(LOAD), replay_inputs(
        [training["train.csv"]], other, [saved.fitted], csv_bytes(task.test_X)), LIMITS)
    assert result.status == "buggy"
    assert "RandomForestRegressor" in result.error and "--refit" in result.error


def test_an_estimator_class_of_the_solution_is_saved_by_its_attributes(
        task: PreparedTask, tmp_path: Path) -> None:
    # The class lives in the solution's namespace, so pickle cannot find it by name; an import
    # after its definition makes the wrapper wrap it all the same.
    own_class = (
        "from sklearn.base import BaseEstimator, RegressorMixin\n\n\n"
        "class Averaged(BaseEstimator, RegressorMixin):\n"
        "    def fit(self, X, y):\n"
        "        from sklearn.ensemble import ExtraTreesRegressor\n"
        "        self.model_ = ExtraTreesRegressor(n_estimators=10).fit(X, y)\n"
        "        return self\n\n"
        "    def predict(self, X):\n"
        "        return self.model_.predict(X)\n\n\n"
        "import sklearn.svm  # noqa: E402, F401\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
        "    model = Averaged().fit(X, y)\n"
        "    return model.predict(X_valid), model.predict(X_test)\n"
    )
    (tmp_path / "node.json").write_text(json.dumps({"node_id": "n5"}))
    record = save_answer(tmp_path, task, "n5", solution(task, own_class), None)
    assert record["saved"] is True, record
    states = saved_states(tmp_path)
    assert states is not None
    # The outer list holds (class name, pickled state) pairs; the states stay unread here.
    assert [name for name, _ in pickle.loads(states[0])] == ["__main__.Averaged"]
