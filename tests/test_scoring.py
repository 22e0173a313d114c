"""Scoring: metric formulas on hand-computed numbers and every submission check's message."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from common.errors import EngineError
from common.metric import METRICS
from engine.evaluation.scoring import SubmissionError, read_submission, score
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task

# --- formulas on tiny arrays ------------------------------------------------------------------


def test_accuracy() -> None:
    value = METRICS["accuracy"].score(["a", "b", "a", "b"], ["a", "a", "a", "b"], None,
                           ("a", "b"))
    assert value == pytest.approx(0.75)


def test_f1_uses_the_positive_class() -> None:
    # tp=2 (rows 0, 4), fp=1 (row 2), fn=1 (row 1): F1 = 2*2 / (2*2 + 1 + 1) = 2/3.
    value = METRICS["f1"].score([1, 1, 0, 0, 1], [1, 0, 1, 0, 1], None, ("0", "1"))
    assert value == pytest.approx(2 / 3)
    # With bad/good the positive class is 'good' (last sorted): tp=1, fp=0, fn=1 -> 2/3.
    value = METRICS["f1"].score(["good", "good", "bad"], ["good", "bad", "bad"], None,
                           ("bad", "good"))
    assert value == pytest.approx(2 / 3)
    # The positive class never predicted nor present: F1 is 0, not an error.
    assert METRICS["f1"].score(["0", "0"], ["0", "0"], None, ("0", "1")) == 0.0


def test_f1_weighted() -> None:
    # a: P=1, R=1/2, F1=2/3 (support 2); b: P=1/2, R=1, F1=2/3 (1); c: F1=1 (1).
    # (2 * 2/3 + 2/3 + 1) / 4 = 3/4.
    value = METRICS["f1_weighted"].score(["a", "a", "b", "c"], ["a", "b", "b", "c"],
                           None, ("a", "b", "c"))
    assert value == pytest.approx(0.75)


def test_binary_roc_auc() -> None:
    # Positive scores 0.35, 0.8 against negatives 0.1, 0.4: 3 of 4 pairs ordered -> 0.75.
    proba = pd.DataFrame({"1": [0.1, 0.4, 0.35, 0.8]})
    value = METRICS["roc_auc"].score([0, 0, 1, 1], [0, 0, 0, 1], proba, ("0", "1"))
    assert value == pytest.approx(0.75)
    # The negative class's column alone means the same thing.
    negative = pd.DataFrame({"0": [0.9, 0.6, 0.65, 0.2]})
    assert METRICS["roc_auc"].score([0, 0, 1, 1], [0, 0, 0, 1], negative,
                          ("0", "1")) == pytest.approx(0.75)


def test_multiclass_roc_auc_is_ovr_weighted() -> None:
    # a (support 2): 3 of 4 pairs -> 3/4; b (1): 2 of 3 -> 2/3; c (1): 3 of 3 -> 1.
    # Weighted: (2 * 3/4 + 2/3 + 1) / 4 = 19/24.
    truth = ["a", "a", "b", "c"]
    proba = pd.DataFrame(
        {"a": [0.9, 0.2, 0.5, 0.1], "b": [0.05, 0.6, 0.4, 0.2], "c": [0.05, 0.2, 0.1, 0.7]}
    )
    value = METRICS["roc_auc"].score(truth, truth, proba, ("a", "b", "c"))
    assert value == pytest.approx(19 / 24)
    assert value == pytest.approx(
        roc_auc_score(truth, proba.to_numpy(), multi_class="ovr", average="weighted",
                      labels=["a", "b", "c"])
    )


def test_binary_log_loss() -> None:
    proba = pd.DataFrame({"1": [0.8, 0.4]})
    value = METRICS["log_loss"].score([1, 0], [1, 0], proba, ("0", "1"))
    assert value == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2)


def test_multiclass_log_loss_renormalises_and_clips() -> None:
    truth = ["a", "b"]
    proba = pd.DataFrame({"a": [0.7, 0.3], "b": [0.2, 0.6], "c": [0.1, 0.1]})
    expected = -(math.log(0.7) + math.log(0.6)) / 2
    assert METRICS["log_loss"].score(truth, truth, proba, ("a", "b", "c")) == (
        pytest.approx(expected)
    )
    # Rows that do not sum to 1 (rounding in a CSV) are rescaled first.
    assert METRICS["log_loss"].score(truth, truth, proba * 2, ("a", "b", "c")) == (
        pytest.approx(expected)
    )
    # A zero probability on the true class is clipped: large but finite.
    zero = pd.DataFrame({"a": [0.0, 0.3], "b": [0.5, 0.6], "c": [0.5, 0.1]})
    value = METRICS["log_loss"].score(truth, truth, zero, ("a", "b", "c"))
    assert math.isfinite(value) and value > 10


def test_regression_metrics() -> None:
    truth, pred = [1.0, 2.0, 3.0], [1.0, 2.0, 5.0]
    assert METRICS["rmse"].score(truth, pred, None, ()) == pytest.approx(
        math.sqrt(4 / 3)
    )
    assert METRICS["mae"].score(truth, pred, None, ()) == pytest.approx(2 / 3)
    # ss_res = 4, ss_tot = 2 -> 1 - 4/2 = -1.
    assert METRICS["r2"].score(truth, pred, None, ()) == pytest.approx(-1.0)


PERFECT = {
    "accuracy": 1.0, "f1": 1.0, "f1_weighted": 1.0, "roc_auc": 1.0, "log_loss": 0.0,
    "rmse": 0.0, "mae": 0.0, "r2": 1.0,
}


@pytest.mark.parametrize("name", sorted(PERFECT))
def test_perfect_prediction_gives_the_best_value(name: str) -> None:
    spec = METRICS[name]
    if "regression" in spec.task_types:
        truth: list[object] = [1.5, 2.0, 7.25, 3.0]
        labels: tuple[str, ...] = ()
        proba = None
        wrong: list[object] = [2.0, 1.0, 7.0, 4.0]
    else:
        truth = ["0", "1", "1", "0"]
        labels = ("0", "1")
        proba = pd.DataFrame({"0": [1.0, 0.0, 0.0, 1.0], "1": [0.0, 1.0, 1.0, 0.0]})
        wrong = ["1", "0", "1", "1"]
    best = spec.score(truth, truth, proba, labels)
    assert best == pytest.approx(PERFECT[name], abs=1e-9)
    worse_proba = None if proba is None else pd.DataFrame({"1": [0.6, 0.4, 0.7, 0.5]})
    worse = spec.score(truth, wrong, worse_proba, labels)
    assert spec.normalise(best) > spec.normalise(worse)


# --- submissions against a prepared task ------------------------------------------------------


def _task(
    tmp_path: Path, target: np.ndarray, metric: str | None = None, n: int = 100
) -> PreparedTask:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=n), "k": rng.integers(0, 5, size=n), "y": target})
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    return prepare_task(TaskSpec(path, "y", metric=metric))


@pytest.fixture
def binary(tmp_path: Path) -> PreparedTask:
    return _task(tmp_path, np.arange(100) % 2)


@pytest.fixture
def regression(tmp_path: Path) -> PreparedTask:
    return _task(tmp_path, np.linspace(0.0, 10.0, 100))


@pytest.fixture
def multiclass_auc(tmp_path: Path) -> PreparedTask:
    return _task(tmp_path, np.array(["a", "b", "c"])[np.arange(300) % 3], "roc_auc", n=300)


def _csv(**columns: object) -> bytes:
    return pd.DataFrame(columns).to_csv(index=False).encode()


def test_submission_error_is_not_an_engine_error() -> None:
    assert not issubclass(SubmissionError, EngineError)


def test_perfect_submission_scores_best(binary: PreparedTask, regression: PreparedTask) -> None:
    assert score(binary, _csv(prediction=binary.valid_y), "valid") == 1.0
    assert score(binary, _csv(prediction=binary.test_y), "test") == 1.0
    assert score(regression, _csv(prediction=regression.valid_y), "valid") == 0.0
    # Valid and test are scored against their own labels: swapping them is not perfect.
    assert score(binary, _csv(prediction=binary.test_y), "valid") < 1.0


def test_score_with_probabilities(multiclass_auc: PreparedTask) -> None:
    task = multiclass_auc
    truth = task.valid_y.astype(str)
    columns = {f"proba_{label}": (truth == label).astype(float) for label in task.labels}
    assert score(task, _csv(prediction=truth, **columns), "valid") == pytest.approx(1.0)
    flat = {f"proba_{label}": np.full(len(truth), 1 / 3) for label in task.labels}
    assert score(task, _csv(prediction=truth, **flat), "valid") == pytest.approx(0.5)


def _expect(task: PreparedTask, data: bytes | None, fragment: str, split: str = "valid") -> str:
    with pytest.raises(SubmissionError) as caught:
        score(task, data, split)
    message = str(caught.value)
    assert fragment in message, message
    return message


def test_missing_file(binary: PreparedTask) -> None:
    _expect(binary, None, "submission/valid.csv was not written")
    _expect(binary, None, "submission/test.csv was not written", split="test")


def test_empty_file(binary: PreparedTask) -> None:
    _expect(binary, b"", "submission/valid.csv is empty")
    _expect(binary, b"\n \n", "is empty")


def test_unparsable_csv(binary: PreparedTask) -> None:
    _expect(binary, b'prediction\n"unclosed\n1\n', "could not be parsed as CSV")


def test_not_utf8(binary: PreparedTask) -> None:
    _expect(binary, b"prediction\n\xff\xfe\n", "is not UTF-8 text")


def test_no_prediction_column(binary: PreparedTask) -> None:
    message = _expect(binary, _csv(pred=binary.valid_y, id=range(20)), "has no column `prediction`")
    assert "columns found: `pred`, `id`" in message
    _expect(binary, _csv(Prediction=binary.valid_y), "`Prediction` must be named exactly")


def test_wrong_row_count(binary: PreparedTask) -> None:
    short = _csv(prediction=binary.valid_y.iloc[:-1])
    assert _expect(binary, short, "has 19 rows") == (
        "submission/valid.csv has 19 rows; expected 20 (one per row of input/valid.csv, in order)"
    )


def test_missing_predictions(binary: PreparedTask, regression: PreparedTask) -> None:
    values = binary.valid_y.astype(float).copy()
    values.iloc[[2, 5]] = np.nan
    message = _expect(binary, _csv(prediction=values), "has 2 missing values in `prediction`")
    assert "data rows 3, 6" in message
    numbers = regression.valid_y.astype(str).copy()
    numbers.iloc[0] = "nan"
    _expect(regression, _csv(prediction=numbers), "1 missing values")


def test_regression_needs_finite_numbers(regression: PreparedTask) -> None:
    words = regression.valid_y.astype(str).copy()
    words.iloc[4] = "high"
    message = _expect(regression, _csv(prediction=words), "non-numeric values in `prediction`")
    assert "'high'" in message and "data rows 5" in message
    infinite = regression.valid_y.astype(float).copy()
    infinite.iloc[1] = np.inf
    _expect(regression, _csv(prediction=infinite), "1 infinite values")


def test_unknown_labels_are_named(binary: PreparedTask) -> None:
    labels = ["2", "cat", "cat", *binary.valid_y.astype(str).iloc[3:]]
    message = _expect(binary, _csv(prediction=labels), "3 predictions that are not labels")
    assert "'2', 'cat'" in message and "predict one of '0', '1'" in message


def test_integer_labels_tolerate_float_spelling(binary: PreparedTask) -> None:
    as_float = binary.valid_y.astype(float)  # written as 0.0 / 1.0
    assert b"1.0" in _csv(prediction=as_float)
    assert score(binary, _csv(prediction=as_float), "valid") == 1.0
    spaced = [f" {int(v)} " for v in binary.valid_y]
    assert score(binary, _csv(prediction=spaced), "valid") == 1.0
    # 1.5 is not an integer label.
    odd = binary.valid_y.astype(float).copy()
    odd.iloc[0] = 1.5
    _expect(binary, _csv(prediction=odd), "'1.5'")


def test_boolean_labels_tolerate_case(tmp_path: Path) -> None:
    task = _task(tmp_path, np.arange(100) % 2 == 0)
    assert task.labels == ("False", "True")
    lower = [str(v).lower() for v in task.valid_y]
    assert score(task, _csv(prediction=lower), "valid") == 1.0


def test_string_labels_are_not_parsed_as_numbers(tmp_path: Path) -> None:
    task = _task(tmp_path, np.array(["007", "NA-code"])[np.arange(100) % 2])
    # A column mixing text and digits stays text: '007' is a label as written, and reading the
    # submission must not turn it into 7 (nor 'NA-code' into a missing value).
    assert task.labels == ("007", "NA-code")
    truth = [str(v) for v in task.valid_y]
    assert score(task, _csv(prediction=truth), "valid") == 1.0
    sevens = ["7" if v == "007" else v for v in truth]
    _expect(task, _csv(prediction=sevens), "not labels of train.csv: '7'")


def test_binary_auc_accepts_the_positive_column_only(tmp_path: Path) -> None:
    task = _task(tmp_path, np.arange(100) % 2, "roc_auc")
    truth = task.valid_y
    assert score(task, _csv(prediction=truth, proba_1=truth.astype(float)), "valid") == 1.0
    # A float-spelled class in the column name is the same class.
    data = pd.DataFrame({"prediction": truth, "proba_1.0": truth.astype(float)})
    assert score(task, data.to_csv(index=False).encode(), "valid") == 1.0
    message = _expect(task, _csv(prediction=truth), "has no column proba_1")
    assert "columns found: `prediction`" in message


def test_multiclass_proba_columns_required(multiclass_auc: PreparedTask) -> None:
    task = multiclass_auc
    truth = task.valid_y.astype(str)
    partial = {"proba_a": np.full(len(truth), 0.5), "proba_b": np.full(len(truth), 0.5)}
    message = _expect(task, _csv(prediction=truth, **partial), "lacks proba_c")
    assert "one proba_<label> column per class" in message


def test_probabilities_must_be_numbers_in_0_1(multiclass_auc: PreparedTask) -> None:
    task = multiclass_auc
    truth = task.valid_y.astype(str)
    columns: dict[str, object] = {
        f"proba_{label}": np.full(len(truth), 1 / 3) for label in task.labels
    }
    high = np.full(len(truth), 1 / 3)
    high[3] = 1.7
    message = _expect(task, _csv(prediction=truth, **{**columns, "proba_b": high}),
                      "1 values of `proba_b` outside [0, 1]")
    assert "data rows 4" in message
    words = np.full(len(truth), "0.3", dtype=object)
    words[0] = "likely"
    _expect(task, _csv(prediction=truth, **{**columns, "proba_c": words}),
            "non-numeric values in `proba_c`")


def test_unknown_split_is_a_programming_error(binary: PreparedTask) -> None:
    with pytest.raises(ValueError, match="split"):
        read_submission(binary, b"prediction\n1\n", "train")


def test_read_submission_returns_canonical_labels(binary: PreparedTask) -> None:
    frame = read_submission(binary, _csv(prediction=binary.valid_y.astype(float)), "valid")
    assert list(frame.columns) == ["prediction"]
    assert set(frame["prediction"]) <= {"0", "1"}
