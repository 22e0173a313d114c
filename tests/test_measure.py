"""The harness's measurements, for real: assembled scripts run in the sandbox, the engine reads
training seconds, predict time per row, model size and an in-sample train score back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.evaluation.scoring import score, score_train
from engine.search_run import task_context
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.harness import assemble, baseline_code
from operators.measure import MARK, Measurements, split_measurements
from sandbox import ExecResult, Limits, run_script


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    rng = np.random.default_rng(0)
    n = 500
    a, b = rng.normal(size=(2, n))
    frame = pd.DataFrame({"a": a, "b": b, "colour": rng.choice(["red", "blue"], n),
                          "label": np.where(a + 0.5 * b + 0.3 * rng.normal(size=n) > 0,
                                            "yes", "no")})
    path = tmp_path_factory.mktemp("measure") / "d.csv"
    frame.to_csv(path, index=False)
    return prepare_task(TaskSpec(path, "label", metric="roc_auc"))


def run(task: PreparedTask, model_code: str) -> tuple[ExecResult, Measurements, str]:
    code = assemble(task_context(task, 0), model_code)
    result = run_script(code, task.inputs(), Limits(wall_seconds=120))
    assert result.status == "ok", result.stderr_tail[-2000:]
    measured, stdout = split_measurements(result.stdout_tail)
    return result, measured, stdout


def test_baseline_is_measured_and_scored_in_sample(task: PreparedTask) -> None:
    result, measured, stdout = run(task, baseline_code(task_context(task, 0)))
    assert measured.train_seconds is not None and 0 < measured.train_seconds < result.seconds
    assert measured.predict_ms_per_row is not None and 0 < measured.predict_ms_per_row < 5
    assert measured.model_mb is not None and 0.001 < measured.model_mb < 50
    assert measured.train_rows == len(task.train)  # 300 rows: all of them, under the sample cap
    assert measured.gate_seconds is None  # no feature program: no gate
    assert MARK not in stdout and MARK in result.stdout_tail
    train = score_train(task, result.train_csv)
    valid = score(task, result.valid_csv, "valid")
    assert train is not None and train >= valid - 0.02  # in-sample is at least as good


def test_slow_predict_is_timed_and_kept_out_of_training(task: PreparedTask) -> None:
    code = '''
import time
from sklearn.linear_model import LogisticRegression


class Slow(LogisticRegression):
    def predict_proba(self, X):
        time.sleep(0.25)
        return super().predict_proba(X)


def fit_predict(X, y, X_valid, X_test):
    X, X_valid, X_test = prepare(X, X_valid, X_test)
    print("fitting a slow model")
    model = Slow().fit(X, y)
    return model.predict_proba(X_valid), model.predict_proba(X_test)
'''
    result, measured, stdout = run(task, code)
    rows = len(task.valid_X) + len(task.test_X)
    assert measured.predict_ms_per_row is not None
    assert measured.predict_ms_per_row >= 0.5 * 1000 / rows  # two sleeps over 200 rows
    assert measured.train_seconds is not None and measured.train_seconds < result.seconds - 0.5
    assert stdout.strip() == "fitting a slow model"
    assert score_train(task, result.train_csv) is not None  # the subclass still matched


def test_pipeline_probability_column_and_model_size(task: PreparedTask) -> None:
    code = '''
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


def fit_predict(X, y, X_valid, X_test):
    X, X_valid, X_test = prepare(X, X_valid, X_test)
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y)
    return model.predict_proba(X_valid)[:, 1], model.predict_proba(X_test)[:, 1]
'''
    result, measured, _ = run(task, code)
    assert measured.model_mb is not None and measured.model_mb < 0.1  # a few coefficients
    assert measured.train_rows == len(task.train)  # matched through the [:, 1] column
    assert score_train(task, result.train_csv) is not None


def test_a_model_fitted_on_part_of_train_gets_no_train_score(task: PreparedTask) -> None:
    code = '''
from sklearn.linear_model import LogisticRegression


def fit_predict(X, y, X_valid, X_test):
    X, X_valid, X_test = prepare(X, X_valid, X_test)
    model = LogisticRegression().fit(X[:200], y[:200])
    model.kept = lambda row: row  # a lambda cannot be pickled
    return model.predict_proba(X_valid), model.predict_proba(X_test)
'''
    result, measured, _ = run(task, code)
    assert measured.train_rows == 0 and result.train_csv is None
    assert measured.model_mb is None and measured.predict_ms_per_row is not None


def test_a_whole_script_has_no_measurements(task: PreparedTask) -> None:
    script = (
        "import os\nimport pandas as pd\n"
        "valid = pd.read_csv('input/valid.csv')\ntest = pd.read_csv('input/test.csv')\n"
        "os.makedirs('submission', exist_ok=True)\n"
        "pd.DataFrame({'prediction': ['yes'] * len(valid), 'proba_yes': 0.5})"
        ".to_csv('submission/valid.csv', index=False)\n"
        "pd.DataFrame({'prediction': ['yes'] * len(test), 'proba_yes': 0.5})"
        ".to_csv('submission/test.csv', index=False)\nprint('done')\n"
    )
    result = run_script(script, task.inputs(), Limits(wall_seconds=60))
    measured, stdout = split_measurements(result.stdout_tail)
    assert result.status == "ok" and measured == Measurements() and stdout == "done\n"


def test_split_measurements_is_robust() -> None:
    assert split_measurements("hello\n") == (Measurements(), "hello\n")
    line = MARK + '{"fit_predict_seconds": 2.0, "predict_seconds": 0.5, "predict_calls": 2, ' \
                  '"rows": 100, "model_bytes": 1048576, "train_rows": 10}\n'
    measured, rest = split_measurements("out\n\n" + line)
    assert rest == "out\n"
    assert measured == Measurements(train_seconds=1.5, predict_ms_per_row=5.0, model_mb=1.0,
                                    train_rows=10)
    assert split_measurements(MARK + "{broken\n")[0] == Measurements()
    assert split_measurements(MARK + '{"predict_seconds": -1, "rows": "x"}\n')[0] == \
        Measurements()


def test_score_train_refuses_what_it_cannot_trust(task: PreparedTask, tmp_path: Path) -> None:
    assert score_train(task, None) is None
    assert score_train(task, b"prediction\nyes\n") is None  # no row column
    assert score_train(task, b"row,prediction,proba_yes\n99999,yes,0.9\n") is None
    assert score_train(task, b"row,prediction,proba_yes\n0,maybe,0.9\n") is None
