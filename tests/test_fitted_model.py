"""The answer saved as fitted make_model() objects (operators/fitted.py, the form of all
engine-written code): fitted once, checked in its save run, then new rows predicted in the
real sandbox by the unpickled objects alone, without their training rows."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.deploy.saved_model import (
    fit_answer,
    replay_inputs,
    saved_states,
    training_inputs,
)
from engine.evaluation.folds import make_folds
from engine.evaluation.select import one_at_a_time
from engine.search_run import task_context
from engine.task.prepare import PreparedTask, TaskSpec, csv_bytes, prepare_task
from operators.fitted import LOAD, MODEL_MAGIC, fitted_wrapper
from operators.harness import assemble, defines_make_model
from operators.kinds.ensemble import ensemble_code
from operators.models import model_code
from sandbox import run_script
from tests.helpers import make_data
from tests.test_fitted import LIMITS, predict_rows, save_answer, solution


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    tmp = tmp_path_factory.mktemp("fitted-model")
    make_data(tmp / "d.csv", rows=200)
    return prepare_task(TaskSpec(data=tmp / "d.csv", target="y"))


# No random_state: equal predictions can only come from the saved fitted object.
UNSEEDED_MODEL = (
    "from sklearn.ensemble import RandomForestRegressor\n\n\n"
    "def make_model():\n"
    "    return Encoded(RandomForestRegressor(n_estimators=10))\n\n\n"
    "def fit_predict(X, y, X_valid, X_test):\n"
    "    model = make_model().fit(X, y)\n"
    "    return model.predict(X_valid), model.predict(X_test)\n"
)


def test_a_fitted_make_model_predicts_without_its_training_rows(task: PreparedTask,
                                                                tmp_path: Path) -> None:
    folds = make_folds(task, 3)
    code = solution(task, UNSEEDED_MODEL)
    (tmp_path / "node.json").write_text(json.dumps({"node_id": "m1"}))
    record = save_answer(tmp_path, task, "m1", code, folds)
    assert record["saved"] is True and record["form"] == "fitted model", record
    states = saved_states(tmp_path)
    assert states is not None and len(states) == 3
    assert all(state.startswith(MODEL_MAGIC) for state in states)
    # Training rows that are not a CSV at all: a fitted model never reads them.
    nothing = [b"\x00 not rows"] * 3
    everything = predict_rows(task, code, nothing, states, task.test_X)
    head = predict_rows(task, code, nothing, states, task.test_X.head(5))
    for whole, part in zip(everything, head, strict=True):
        assert np.array_equal(part, whole[:5])
    assert not np.allclose(everything[0], everything[1])  # three models, other rows each
    retrained = run_script(code, {**training_inputs(task, folds)[0],
                                  "test.csv": csv_bytes(task.test_X)}, LIMITS)
    assert retrained.test_csv is not None
    again = pd.read_csv(io.BytesIO(retrained.test_csv))["prediction"].to_numpy()
    assert not np.allclose(again, everything[0])  # a real fit of this model differs every time


def test_an_engine_ensemble_with_feature_programs_is_saved_as_a_fitted_model(
        tmp_path: Path) -> None:
    make_data(tmp_path / "d.csv", rows=160)
    frame = pd.read_csv(tmp_path / "d.csv")
    frame["kind"] = np.where(frame["y"] > frame["y"].median(), "high", "low")
    frame["colour"] = np.resize(["red", "blue", None], len(frame))
    frame.drop(columns=["y"]).to_csv(tmp_path / "c.csv", index=False)
    task = prepare_task(TaskSpec(data=tmp_path / "c.csv", target="kind", metric="log_loss"))
    ctx = task_context(task, 0)
    program = "def add_features(df):\n    df['ab'] = df['a'] * df['b']\n    return df\n"
    members = [assemble(ctx, model_code(ctx, "lgbm", {"n_estimators": 20}, [program])),
               assemble(ctx, model_code(ctx, "knn", {"n_neighbors": 500}))]
    code = ensemble_code(ctx, members, [2, 1])
    assert defines_make_model(code)
    (tmp_path / "node.json").write_text(json.dumps({"node_id": "e1"}))
    record = save_answer(tmp_path, task, "e1", code, None)
    assert record["saved"] is True and record["form"] == "fitted model", record
    states = saved_states(tmp_path)
    assert states is not None
    result = run_script(fitted_wrapper(LOAD), replay_inputs(
        [b""], code, states, csv_bytes(task.test_X.head(7))), LIMITS)
    assert result.status == "ok", result.stderr_tail
    assert result.valid_csv is not None
    served = pd.read_csv(io.BytesIO(result.valid_csv))
    assert list(served.columns) == ["fold", "prediction", "proba_high", "proba_low"]
    # The same rows as the saved run's own test predictions (fit_answer checked all of them).
    (inputs,) = training_inputs(task, None)
    retrained = run_script(code, {**inputs, "test.csv": csv_bytes(task.test_X.head(7))},
                           LIMITS)
    assert retrained.test_csv is not None
    fresh = pd.read_csv(io.BytesIO(retrained.test_csv))
    assert np.allclose(served["proba_high"], fresh["proba_high"])


def test_a_model_that_unpickles_differently_is_not_saved(task: PreparedTask,
                                                         tmp_path: Path) -> None:
    forgetful = (
        "from sklearn.linear_model import Ridge\n\n\n"
        "class Forgetful(Encoded):\n"
        "    def fit(self, X, y):\n"
        "        super().fit(X, y)\n"
        "        self.shift_ = 1.0\n"
        "        return self\n\n"
        "    def __getstate__(self):  # its pickle leaves the shift out\n"
        "        return {k: v for k, v in self.__dict__.items() if k != 'shift_'}\n\n"
        "    def predict(self, X):\n"
        "        return super().predict(X) + getattr(self, 'shift_', 0.0)\n\n\n"
        "def make_model():\n"
        "    return Forgetful(Ridge())\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    model = make_model().fit(X, y)\n"
        "    return model.predict(X_valid), model.predict(X_test)\n"
    )
    record = save_answer(tmp_path, task, "m2", solution(task, forgetful), None)
    assert record["saved"] is False
    assert "unpickled model changed its test predictions" in record["reason"], record
    assert not (tmp_path / "model").exists()


def test_a_fitted_model_over_the_cap_is_not_saved_and_its_refit_scores_the_answer(
        task: PreparedTask) -> None:
    # A Ridge carrying 210 MiB of ballast: its pickle would pass the 200 MiB the engine reads
    # back, so the save run stops pickling there; its fit's test predictions still come back
    # (a holdout run's refit is scored by them, not fitted again).
    ballast = (
        "from sklearn.linear_model import Ridge\n\n\n"
        "class Heavy(Encoded):\n"
        "    def fit(self, X, y):\n"
        "        super().fit(X, y)\n"
        "        self.ballast_ = np.ones(210 * 2**20 // 8)\n"
        "        return self\n\n\n"
        "def make_model():\n"
        "    return Heavy(Ridge())\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    model = make_model().fit(X, y)\n"
        "    return model.predict(X_valid), model.predict(X_test)\n"
    )
    code = solution(task, ballast)
    fitted = fit_answer(task, "m3", code, None, one_at_a_time(run_script), LIMITS)
    assert fitted.record["saved"] is False and not fitted.states
    assert "the fitted model takes over 200 MiB" in fitted.record["reason"], fitted.record
    (test_csv,) = fitted.test_csvs
    fresh = run_script(code, {**training_inputs(task, None)[0],
                              "test.csv": csv_bytes(task.test_X)}, LIMITS)
    assert fresh.test_csv is not None
    assert np.allclose(pd.read_csv(io.BytesIO(test_csv))["prediction"],
                       pd.read_csv(io.BytesIO(fresh.test_csv))["prediction"])


# Predictions that test how a reply is written: missing, subnormal, huge, repeating decimals.
EDGE_VALUES = "[float('nan'), 5e-324, 1e20, 0.1, -3.0, 1 / 3, 123456789.123456789]"
FIXED_MODEL = (
    "class Fixed:\n"
    "    def fit(self, X, y):\n"
    "        return self\n\n"
    "    def predict(self, X):\n"
    f"        return np.resize(np.array({EDGE_VALUES}), len(X))\n\n"
    "    def predict_proba(self, X):\n"
    "        p = np.resize(np.array([0.1, 1 / 3, 1.0, 5e-324, 0.5, 0.25, 0.999]), len(X))\n"
    "        return np.column_stack([1 - p, p])\n\n\n"
    "def make_model():\n"
    "    return Fixed()\n\n\n"
    "def fit_predict(X, y, X_valid, X_test):\n"
    "    model = make_model().fit(X, y)\n"
    "    return (model.predict_proba(X_valid), model.predict_proba(X_test)) \\\n"
    "        if 'LABELS' in globals() else (model.predict(X_valid), model.predict(X_test))\n"
)


@pytest.mark.parametrize("labels", [None, ("a,b", 'say "hi"')])
def test_a_served_reply_is_written_as_pandas_writes_it(labels: tuple[str, str] | None,
                                                       tmp_path: Path) -> None:
    make_data(tmp_path / "d.csv", rows=120)
    frame = pd.read_csv(tmp_path / "d.csv")
    if labels is not None:  # text labels a CSV writer must quote
        frame["y"] = np.where(frame["y"] > frame["y"].median(), *labels)
    frame.to_csv(tmp_path / "e.csv", index=False)
    task = prepare_task(TaskSpec(data=tmp_path / "e.csv", target="y",
                                 metric=None if labels is None else "roc_auc"))
    code = solution(task, FIXED_MODEL)
    (tmp_path / "node.json").write_text(json.dumps({"node_id": "f1"}))
    assert save_answer(tmp_path, task, "f1", code, make_folds(task, 2))["saved"] is True
    states = saved_states(tmp_path)
    assert states is not None and len(states) == 2
    rows = task.test_X.head(7)
    result = run_script(fitted_wrapper(LOAD), replay_inputs(
        [b""] * 2, code, states, csv_bytes(rows)), LIMITS)
    assert result.status == "ok", result.stderr_tail
    # What the reply was before it was written by the csv module: pandas' frames, stacked.
    one = pd.read_csv(io.BytesIO(run_script(code, {**training_inputs(task, None)[0],
                                                   "test.csv": csv_bytes(rows)},
                                            LIMITS).test_csv or b""))
    assert len(one) == 7 and one.iloc[:, -1].isna().any() == (labels is None)
    stacked = pd.concat([one, one], ignore_index=True)
    stacked.insert(0, "fold", [0] * 7 + [1] * 7)
    assert result.valid_csv == stacked.to_csv(index=False).encode()
