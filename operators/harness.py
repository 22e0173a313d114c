"""The harness: the fixed script around LLM-written model code, and the engine's own code.

The model writes only `fit_predict(X, y, X_valid, X_test)`; the engine wraps it in a fixed
harness that reads the inputs and writes the submission (a 1.5B model can fill in a model, it
cannot be trusted with file handling, and it confuses the hidden valid split with a split of
its own). The node's code is the assembled script, so `best/solution.py` runs on its own. The
engine-written nodes (the LightGBM baseline root, ensembles of working nodes) are assembled
here too, without an LLM call.
"""

from __future__ import annotations

from operators.context import TaskContext
from operators.measure import HARNESS_MEASURE
from search.node import MODEL_END, MODEL_START, PROBA_PREFIX

_HEAD = '''"""Solution script: the engine's harness around LLM-written model code.

Run it in a folder holding input/ (train.csv, valid.csv, test.csv); it writes
submission/valid.csv and submission/test.csv.
"""
import os
import re

import numpy as np
import pandas as pd

TARGET = __TARGET__
train = pd.read_csv("input/train.csv")
X = train.drop(columns=[TARGET])
y = train[TARGET]
X_valid = pd.read_csv("input/valid.csv")  # no target: predict every row
X_test = pd.read_csv("input/test.csv")  # no target: predict every row


'''

# The harness's feature preparation; the non-LLM benchmark baselines exec it in-process, so they
# see exactly the features every candidate gets from `prepare()`.
PREPARE_SOURCE = '''def prepare(X, X_valid, X_test, max_levels=20):
    """One-hot encode text columns and fill missing values the same way for all three
    frames, from the training rows alone (so the columns never depend on the rows
    predicted); returns three numeric DataFrames with identical columns."""
    frames = pd.concat([X, X_valid, X_test], keys=["train", "valid", "test"])
    text = list(frames.select_dtypes(exclude="number").columns)
    for col in text:  # ids and free text would explode the one-hot: keep common values
        common = [v for v in frames.loc["train", col].value_counts().index[:max_levels]
                  if v != "other"] + ["other"]
        known = frames[col].isin(common) | frames[col].isna()  # missing: its own column
        frames[col] = pd.Categorical(frames[col].where(known, "other"), categories=common)
    frames = pd.get_dummies(frames, columns=text, dummy_na=True, dtype=float)
    frames = frames.fillna(frames.loc["train"].median(numeric_only=True)).fillna(0.0)
    names, seen = [], set()
    for col in frames.columns:  # lightgbm rejects some characters in feature names
        name = re.sub(r"[^0-9A-Za-z_]", "_", str(col))
        while name in seen:
            name += "_"
        seen.add(name)
        names.append(name)
    frames.columns = names
    return frames.loc["train"], frames.loc["valid"], frames.loc["test"]
'''


_VALID_LINE = 'X_valid = pd.read_csv("input/valid.csv")  # no target: predict every row\n'
# Engine-written code only: every fold in one process, so it reads every dev label.
_FOLDS_LINE = ('FOLDS = pd.read_csv("input/folds.csv")["fold"].to_numpy()  # fold of each train '
               'row; -1: never held out\n')


def harness_head(ctx: TaskContext, all_folds: bool = False) -> str:
    head = _HEAD.replace(_VALID_LINE, _FOLDS_LINE) if all_folds else _HEAD
    return (head + PREPARE_SOURCE).replace("__TARGET__", repr(ctx.target))


# Class labels of a label metric. A prediction with one float column per class is taken as
# class probabilities and gives its most probable class: a remembered case written for a
# probability metric (every shipped classification case) then runs unchanged on a label metric.
_LABELS_FUNCTION = """

def _treeml_labels(pred):
    pred = np.asarray(pred)
    if pred.ndim == 2 and pred.shape[1] == len(LABELS) > 1 and pred.dtype.kind == "f":
        return np.asarray(LABELS, dtype=object)[pred.argmax(axis=1)]
    return pred.reshape(len(pred), -1)[:, 0]

"""


def _frame_function(ctx: TaskContext) -> str:
    labels = f"LABELS = {list(ctx.labels)!r}\n" if ctx.task_type != "regression" else ""
    if ctx.needs_proba:
        body = (
            "    if pred.ndim == 1:  # binary: probability of LABELS[1]\n"
            "        pred = np.column_stack([1 - pred, pred])\n"
            "    if pred.ndim != 2 or pred.shape[1] != len(LABELS):\n"
            "        raise ValueError(f\"fit_predict must return probabilities of shape \"\n"
            "                         f\"(rows, {len(LABELS)}) for {path}; got {pred.shape}\")\n"
            "    out = pd.DataFrame({\"prediction\": np.asarray(LABELS)[pred.argmax(axis=1)]})\n"
            "    for i, label in enumerate(LABELS):\n"
            f"        out[f\"{PROBA_PREFIX}{{label}}\"] = pred[:, i]\n"
        )
    elif ensemble_vote(ctx):  # labels; the ensemble's vote uses _treeml_labels too
        labels += _LABELS_FUNCTION
        body = "    out = pd.DataFrame({\"prediction\": _treeml_labels(pred)})\n"
    else:
        body = "    out = pd.DataFrame({\"prediction\": pred.reshape(len(pred), -1)[:, 0]})\n"
    return (
        f"\n{labels}\n"
        "def _treeml_frame(pred, rows, path):\n"
        "    pred = np.asarray(pred)\n"
        "    if len(pred) != rows:\n"
        "        raise ValueError(f\"fit_predict returned {len(pred)} predictions for {path}; \"\n"
        "                         f\"expected {rows}: predict every row, never split \"\n"
        "                         \"X_valid or X_test\")\n"
        + body
        + "    return out\n\n\n"
    )


def harness_tail(ctx: TaskContext, all_folds: bool = False) -> str:
    if all_folds:
        return _frame_function(ctx) + HARNESS_MEASURE + _ALL_FOLDS_TAIL
    return (
        _frame_function(ctx)
        + "def _write(pred, rows, path):\n"
        "    _treeml_frame(pred, len(rows), path).to_csv(path, index=False)\n"
        + HARNESS_MEASURE
        + "\n\n_treeml_measure = _TreemlMeasure(len(X), len(X_valid), len(X_test))\n"
        "_treeml_start = _treeml_time.perf_counter()\n"
        "_treeml_sys.setprofile(_treeml_measure.hook)\n"
        "try:\n"
        "    valid_pred, test_pred = fit_predict(X.copy(), y.copy(), X_valid.copy(), "
        "X_test.copy())\n"
        "finally:\n"
        "    _treeml_sys.setprofile(None)\n"
        "_treeml_seconds = _treeml_time.perf_counter() - _treeml_start\n"
        "os.makedirs(\"submission\", exist_ok=True)\n"
        "_write(valid_pred, X_valid, \"submission/valid.csv\")\n"
        "_write(test_pred, X_test, \"submission/test.csv\")\n"
        "_treeml_measure.report(_treeml_seconds, valid_pred)\n"
    )


# Every fold of the run in one process: out-of-fold predictions of the held-out rows in row
# order (submission/valid.csv), one block of test predictions per fold model with a `fold`
# column (submission/test.csv); the first fold's call is the one measured.
_ALL_FOLDS_TAIL = """

_treeml_valid, _treeml_test, _treeml_first = [], [], None
for _treeml_fold in sorted(set(FOLDS[FOLDS >= 0].tolist())):
    _treeml_in, _treeml_out = FOLDS != _treeml_fold, FOLDS == _treeml_fold
    _treeml_args = (X[_treeml_in].reset_index(drop=True), y[_treeml_in].reset_index(drop=True),
                    X[_treeml_out].reset_index(drop=True), X_test.copy())
    if _treeml_first is None:
        _treeml_measure = _TreemlMeasure(*(len(a) for a in _treeml_args[::2]), len(X_test))
        _treeml_start = _treeml_time.perf_counter()
        _treeml_sys.setprofile(_treeml_measure.hook)
        try:
            valid_pred, test_pred = fit_predict(*_treeml_args)
        finally:
            _treeml_sys.setprofile(None)
        _treeml_first = (_treeml_time.perf_counter() - _treeml_start, valid_pred)
    else:
        valid_pred, test_pred = fit_predict(*_treeml_args)
    _treeml_part = _treeml_frame(valid_pred, int(_treeml_out.sum()), "the held-out rows")
    _treeml_part.index = np.flatnonzero(_treeml_out)
    _treeml_valid.append(_treeml_part)
    _treeml_part = _treeml_frame(test_pred, len(X_test), "X_test")
    _treeml_part.insert(0, "fold", _treeml_fold)
    _treeml_test.append(_treeml_part)
os.makedirs("submission", exist_ok=True)
pd.concat(_treeml_valid).sort_index().to_csv("submission/valid.csv", index=False)
pd.concat(_treeml_test).to_csv("submission/test.csv", index=False)
_treeml_measure.report(*_treeml_first)
"""


def assemble(ctx: TaskContext, model_code: str, all_folds: bool = False) -> str:
    """The runnable script: harness head, the model's code, harness tail. `all_folds`: every
    fold of the run in one process (engine-written code only; see engine/evaluation/folds.py)."""
    return (f"{harness_head(ctx, all_folds)}\n{MODEL_START}\n{model_code.strip()}\n"
            f"{MODEL_END}\n{harness_tail(ctx, all_folds)}")


def model_part(code: str) -> str:
    """The LLM-written part of an assembled script (a whole-script reply is all model code)."""
    if MODEL_START in code and MODEL_END in code:
        return code.split(MODEL_START, 1)[1].split(MODEL_END, 1)[0].strip() + "\n"
    return code


def predict_call(ctx: TaskContext) -> str:
    method = "predict_proba" if ctx.needs_proba else "predict"
    return f"model.{method}(X_valid), model.{method}(X_test)"


def baseline_code(ctx: TaskContext) -> str:
    """The engine's own root: LightGBM with default settings on `prepare`d features."""
    kind = "LGBMRegressor" if ctx.task_type == "regression" else "LGBMClassifier"
    return (
        "import lightgbm as lgb\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
        f"    model = lgb.{kind}(random_state=0, verbose=-1)\n"
        "    model.fit(X, y)\n"
        f"    return {predict_call(ctx)}\n"
    )


_ENSEMBLE = """import numpy as np

# The members' model code, each run in its own namespace so their names cannot clash, and the
# weight of each (ensemble selection: how often it was picked).
MEMBERS = __MEMBERS__
WEIGHTS = __WEIGHTS__


def _member(source, X, y, X_valid, X_test):
    # The module-level names the harness gives model code when it runs as its own node, bound
    # to this call's rows: code that uses them outside fit_predict runs here as it ran there.
    scope = {"prepare": prepare, "np": np, "pd": pd, "os": os, "re": re, "TARGET": TARGET,
             "X": X.copy(), "y": y.copy(), "X_valid": X_valid.copy(), "X_test": X_test.copy(),
             "train": X.assign(**{TARGET: y.to_numpy()}), "__name__": "member"}
    exec(compile(source, "member", "exec"), scope)
    return scope["fit_predict"](X.copy(), y.copy(), X_valid.copy(), X_test.copy())


def _combine(preds):
__COMBINE__

def fit_predict(X, y, X_valid, X_test):
    outs = [_member(source, X, y, X_valid, X_test) for source in MEMBERS]
    return _combine([v for v, _ in outs]), _combine([t for _, t in outs])
"""

_MEAN = """    columns = [np.asarray(p, dtype=float).reshape(len(p), -1)[:, 0] for p in preds]
    return np.average(columns, axis=0, weights=WEIGHTS)
"""

_MEAN_PROBA = """    arrays = []
    for p in preds:  # binary members may return the positive class's probability alone
        p = np.asarray(p, dtype=float)
        arrays.append(np.column_stack([1 - p, p]) if p.ndim == 1 else p)
    return np.average(arrays, axis=0, weights=WEIGHTS)
"""

# Weighted vote; a tie goes to the label of the earliest member among the tied.
_VOTE = """    labels = [list(_treeml_labels(p)) for p in preds]
    out = []
    for row in zip(*labels):
        score = {}
        for value, weight in zip(row, WEIGHTS):
            score[str(value)] = score.get(str(value), 0) + weight
        top = max(score.values())
        out.append(next(v for v in row if score[str(v)] == top))
    return np.asarray(out, dtype=object)
"""


def ensemble_vote(ctx: TaskContext) -> bool:
    """Class labels alone cannot be averaged: such tasks ensemble by a weighted vote."""
    return ctx.task_type != "regression" and not ctx.needs_proba


def ensemble_code(ctx: TaskContext, member_codes: list[str],
                  weights: list[int] | None = None) -> str:
    """The assembled script of an engine-written ensemble of model codes (default weights:
    equal)."""
    combine = _VOTE if ensemble_vote(ctx) else _MEAN_PROBA if ctx.needs_proba else _MEAN
    sources = "[\n" + "".join(f"    {model_part(c)!r},\n" for c in member_codes) + "]"
    model = (_ENSEMBLE.replace("__MEMBERS__", sources)
             .replace("__WEIGHTS__", repr(weights or [1] * len(member_codes)))
             .replace("__COMBINE__", combine.rstrip("\n")))
    return assemble(ctx, model)

