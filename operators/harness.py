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
from search.node import MODEL_END, MODEL_START

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
    frames; returns three numeric DataFrames with identical columns."""
    frames = pd.concat([X, X_valid, X_test], keys=["train", "valid", "test"])
    text = list(frames.select_dtypes(exclude="number").columns)
    for col in text:  # ids and free text would explode the one-hot: keep common values
        common = frames[col].value_counts().index[:max_levels]
        frames[col] = frames[col].where(frames[col].isin(common), "other")
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


def harness_head(ctx: TaskContext) -> str:
    return (_HEAD + PREPARE_SOURCE).replace("__TARGET__", repr(ctx.target))


def harness_tail(ctx: TaskContext) -> str:
    labels = f"LABELS = {list(ctx.labels)!r}\n" if ctx.needs_proba else ""
    if ctx.needs_proba:
        body = (
            "    if pred.ndim == 1:  # binary: probability of LABELS[1]\n"
            "        pred = np.column_stack([1 - pred, pred])\n"
            "    if pred.ndim != 2 or pred.shape[1] != len(LABELS):\n"
            "        raise ValueError(f\"fit_predict must return probabilities of shape \"\n"
            "                         f\"(rows, {len(LABELS)}) for {path}; got {pred.shape}\")\n"
            "    out = pd.DataFrame({\"prediction\": np.asarray(LABELS)[pred.argmax(axis=1)]})\n"
            "    for i, label in enumerate(LABELS):\n"
            "        out[f\"proba_{label}\"] = pred[:, i]\n"
        )
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
        "def _write(pred, rows, path):\n"
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


def assemble(ctx: TaskContext, model_code: str) -> str:
    """The runnable script: harness head, the model's code, harness tail."""
    return (f"{harness_head(ctx)}\n{MODEL_START}\n{model_code.strip()}\n{MODEL_END}\n"
            f"{harness_tail(ctx)}")


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

# The members' model code, each run in its own namespace so their names cannot clash.
MEMBERS = __MEMBERS__


def _member(source, X, y, X_valid, X_test):
    scope = {"prepare": prepare, "np": np, "pd": pd, "__name__": "member"}
    exec(compile(source, "member", "exec"), scope)
    return scope["fit_predict"](X.copy(), y.copy(), X_valid.copy(), X_test.copy())


def _combine(preds):
__COMBINE__

def fit_predict(X, y, X_valid, X_test):
    outs = [_member(source, X, y, X_valid, X_test) for source in MEMBERS]
    return _combine([v for v, _ in outs]), _combine([t for _, t in outs])
"""

_MEAN = """    columns = [np.asarray(p, dtype=float).reshape(len(p), -1)[:, 0] for p in preds]
    return np.mean(columns, axis=0)
"""

_MEAN_PROBA = """    arrays = []
    for p in preds:  # binary members may return the positive class's probability alone
        p = np.asarray(p, dtype=float)
        arrays.append(np.column_stack([1 - p, p]) if p.ndim == 1 else p)
    return np.mean(arrays, axis=0)
"""

# Majority vote; a tie goes to the first member, the best one by valid score.
_VOTE = """    labels = [list(np.asarray(p).ravel()) for p in preds]
    out = []
    for row in zip(*labels):
        keys = [str(v) for v in row]
        top = max(keys.count(k) for k in keys)
        out.append(row[0] if keys.count(keys[0]) == top else
                   next(v for v, k in zip(row, keys) if keys.count(k) == top))
    return np.asarray(out, dtype=object)
"""


def ensemble_vote(ctx: TaskContext) -> bool:
    """Class labels cannot be averaged: such tasks ensemble by a vote of three."""
    return ctx.task_type != "regression" and not ctx.needs_proba


def ensemble_code(ctx: TaskContext, member_codes: list[str]) -> str:
    """The assembled script of an engine-written ensemble of model codes (see search/ensemble)."""
    combine = _VOTE if ensemble_vote(ctx) else _MEAN_PROBA if ctx.needs_proba else _MEAN
    sources = "[\n" + "".join(f"    {model_part(c)!r},\n" for c in member_codes) + "]"
    model = _ENSEMBLE.replace("__MEMBERS__", sources).replace("__COMBINE__", combine.rstrip("\n"))
    return assemble(ctx, model)

