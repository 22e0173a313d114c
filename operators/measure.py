"""What the harness measures about a solution, and how the engine reads it back.

The harness runs the LLM's `fit_predict` under a profile hook (`sys.setprofile`) that watches
only calls named `fit` or `predict`/`predict_proba`/`predict_log_proba`/`decision_function`/
`transform` on objects that have a `fit` method (estimators, pipelines, encoders):

- the outermost such calls on the valid or test rows are timed (calls nested in another one,
  e.g. the predicts of a grid search inside `fit`, are part of that one): their seconds, over
  the rows of valid + test, are `predict_ms_per_row`; `fit_predict`'s other seconds are
  `train_seconds` (feature engineering, fitting, any cross-validation);
- the objects that made those calls are pickled into a byte counter: `model_mb` (what a
  deployment would have to load; the harness's own `prepare` and plain pandas code are not in
  it, and a model that cannot be pickled has no size);
- when one model's call on the valid rows returned exactly the valid predictions (or their
  second column, for a binary probability) and that model was fitted on all train rows, the
  harness predicts a sample of up to `TRAIN_SAMPLE` train rows with it and writes them to
  `submission/train.csv` (column `row`: the row of input/train.csv), which the engine scores
  as `train_metric_raw` (for implementation verification).

An all-folds run that fits a feature program's gate (operators/harness.py) times those fits
apart, after the others: `gate_seconds`.

It prints one line, `MARK` + JSON, after the submission is written; `split_measurements`
removes it from the node's stdout. A whole-script reply has no harness, so no line: its
measurements are None. Measurements are wall-clock seconds on a shared machine: expect noise
of tens of percent, and more when the LLM shares the cores. The hook is one Python call per
function call of the candidate: under 1 % on library fits, but 5x on a pure-Python loop of tiny
calls, so `train_seconds` of call-heavy Python code is inflated. The hook is removed before
the submission is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MARK = "__treeml_measure__ "
TRAIN_SAMPLE = 5000
# A train prediction that the measured predict speed says would take longer is skipped.
TRAIN_PREDICT_SECONDS = 20.0

# Inserted by operators.harness.harness_tail after the model code. Every global name starts with
# _treeml so it can neither clobber nor be clobbered by a name of the model code.
HARNESS_MEASURE = '''
import json as _treeml_json
import pickle as _treeml_pickle
import sys as _treeml_sys
import time as _treeml_time


def _treeml_rows(X):
    shape = getattr(X, "shape", None)
    if shape:
        return int(shape[0])
    try:
        return len(X)
    except TypeError:
        return None


class _TreemlBytes:
    """A file that only counts what is written to it."""

    size = 0

    def write(self, data):
        self.size += len(data)


class _TreemlMeasure:
    """Engine instrumentation, not part of the model: times the model's predict calls on the
    valid and test rows, keeps the models that made them, prints one line for the engine."""

    NAMES = frozenset({"fit", "predict", "predict_proba", "predict_log_proba",
                       "decision_function", "transform"})

    def __init__(self, n_train, n_valid, n_test):
        self.n_train, self.n_valid, self.n_test = n_train, n_valid, n_test
        self.stack = []  # (frame, name, model, X, rows, start) of the calls open now
        self.predict_seconds = 0.0
        self.predict_calls = 0
        self.models = {}  # id -> model that predicted valid or test rows
        self.fitted = {}  # id -> (model, X) of its last fit on all train rows
        self.valid_calls = []  # (model, method, returned) on the valid rows

    def hook(self, frame, event, arg):
        try:
            if event == "call":
                code = frame.f_code
                if code.co_name not in self.NAMES or code.co_argcount < 2:
                    return
                local = frame.f_locals
                model = local.get("self")
                if not callable(getattr(model, "fit", None)):
                    return
                X = local.get(code.co_varnames[1])
                self.stack.append((frame, code.co_name, model, X, _treeml_rows(X),
                                   _treeml_time.perf_counter()))
            elif event == "return" and self.stack and self.stack[-1][0] is frame:
                _, name, model, X, rows, start = self.stack.pop()
                if self.stack:
                    return  # nested in an outer fit or predict: part of that one
                if name == "fit":
                    if rows == self.n_train:
                        self.fitted[id(model)] = (model, X)
                elif rows in (self.n_valid, self.n_test):
                    self.predict_seconds += _treeml_time.perf_counter() - start
                    self.predict_calls += 1
                    self.models[id(model)] = model
                    if rows == self.n_valid and arg is not None:
                        self.valid_calls.append((model, name, arg))
        except Exception:
            pass  # instrumentation must never change what the model code does

    def report(self, seconds, valid_pred, gate_seconds=None):
        out = {"fit_predict_seconds": seconds, "predict_seconds": self.predict_seconds,
               "predict_calls": self.predict_calls, "rows": self.n_valid + self.n_test,
               "model_bytes": None, "train_rows": 0, "gate_seconds": gate_seconds}
        try:
            if self.models:
                counter = _TreemlBytes()
                _treeml_pickle.dump(list(self.models.values()), counter,
                                    protocol=_treeml_pickle.HIGHEST_PROTOCOL)
                out["model_bytes"] = counter.size
        except Exception as exc:
            out["note"] = f"model not picklable: {type(exc).__name__}"
        try:
            out["train_rows"] = self.train_predictions(valid_pred)
        except Exception as exc:
            out["train_note"] = f"{type(exc).__name__}: {exc}"[:200]
        print("\\n" + __MARK__ + _treeml_json.dumps(out), flush=True)

    def train_predictions(self, valid_pred):
        wanted = np.asarray(valid_pred)
        for model, name, returned in reversed(self.valid_calls):
            got = np.asarray(returned)
            if got.shape == wanted.shape and np.array_equal(got, wanted):
                pick = None
            elif (got.ndim == 2 and got.shape[1] == 2 and wanted.ndim == 1
                  and len(got) == len(wanted) and np.array_equal(got[:, 1], wanted)):
                pick = 1
            else:
                continue
            fitted = self.fitted.get(id(model))
            if fitted is None or fitted[0] is not model:
                return 0
            per_row = self.predict_seconds / max(1, self.n_valid + self.n_test)
            size = min(self.n_train, __SAMPLE__)
            if per_row * size > __SECONDS__:
                return 0
            rows = np.sort(np.random.default_rng(0).choice(self.n_train, size, replace=False))
            X = fitted[1]
            part = X.iloc[rows] if hasattr(X, "iloc") else X[rows]
            pred = np.asarray(getattr(model, name)(part))
            if pick is not None:
                pred = pred[:, pick]
            frame = _treeml_frame(pred, size, "submission/train.csv")
            frame.insert(0, "row", rows)
            frame.to_csv("submission/train.csv", index=False)
            return size
        return 0
'''.replace("__MARK__", repr(MARK)).replace("__SAMPLE__", str(TRAIN_SAMPLE)).replace(
    "__SECONDS__", repr(TRAIN_PREDICT_SECONDS))


@dataclass(frozen=True, slots=True)
class Measurements:
    train_seconds: float | None = None
    predict_ms_per_row: float | None = None
    model_mb: float | None = None
    train_rows: int = 0  # rows of submission/train.csv (0: no train score)
    gate_seconds: float | None = None  # a feature program's gate fits in the run (None: none)

    def node_fields(self) -> dict[str, Any]:
        return {"train_seconds": self.train_seconds,
                "predict_ms_per_row": self.predict_ms_per_row, "model_mb": self.model_mb}


def split_measurements(stdout: str) -> tuple[Measurements, str]:
    """The harness's measurements from a script's stdout, and the stdout without their line.

    No line (a whole-script reply, a crash before the end) gives empty Measurements.
    """
    lines = stdout.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        if not lines[i].startswith(MARK):
            continue
        try:
            data = json.loads(lines[i][len(MARK):], strict=False)
        except ValueError:
            return Measurements(), stdout
        start = i - 1 if i > 0 and lines[i - 1] == "\n" else i  # the blank line printed first
        return _from_json(data), "".join(lines[:start] + lines[i + 1:])
    return Measurements(), stdout


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value >= 0 else None


def _from_json(data: Any) -> Measurements:
    if not isinstance(data, dict):
        return Measurements()
    total = _number(data.get("fit_predict_seconds"))
    predict = _number(data.get("predict_seconds")) or 0.0
    calls = _number(data.get("predict_calls")) or 0
    rows = _number(data.get("rows")) or 0
    size = _number(data.get("model_bytes"))
    return Measurements(
        train_seconds=None if total is None else max(0.0, total - predict),
        predict_ms_per_row=1000.0 * predict / rows if calls and rows else None,
        model_mb=None if size is None else size / 2**20,
        train_rows=int(_number(data.get("train_rows")) or 0),
        gate_seconds=_number(data.get("gate_seconds")),
    )
