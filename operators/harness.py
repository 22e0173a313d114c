"""The harness: the fixed script around LLM-written model code, and the engine's own code.

The LLM writes only `fit_predict(X, y, X_valid, X_test)`; the engine wraps it in a fixed
harness that reads the inputs and writes the submission (a 1.5B model can fill in a model, it
cannot be trusted with file handling, and it confuses the hidden valid split with a split of
its own). The node's code is the assembled script, so `best/solution.py` runs on its own. The
engine-written nodes are assembled here too, without an LLM call (the LightGBM baseline root
here; an ensemble's members in operators/kinds/ensemble.py).

Engine-written model code is a fit and a predict: it defines `make_model()`, an unfitted
scikit-learn-style estimator (an `Encoded` step: the harness's features, then the model),
and a `fit_predict` that fits it and predicts. The saved answer keeps that fitted object and
predicts new rows with it alone (operators/fitted.py); LLM-written `fit_predict` code, which
fits and predicts in one call, is replayed over its training rows instead.
"""

from __future__ import annotations

import ast

from operators.context import TaskContext
from operators.measure import HARNESS_MEASURE
from operators.prepare_source import PREPARE_SOURCE
from search.node import MODEL_END, MODEL_START, PROBA_PREFIX

# The name a saved model gives the script when it loads it as a module: the head reads no rows
# and the run is skipped, so only the definitions (make_model, Encoded, ...) are made.
MODEL_MODULE = "treeml_model"
# The first bytes of a saved fitted make_model() (a fit-and-predict solution); without them, a
# state is a replay's list of fits (operators/fitted.py).
MODEL_MAGIC = b"treeml-model\n"
# The first bytes of the fold models an all-folds scoring run keeps (submission/fitted.pkl):
# then a line of the states' byte sizes, then the states (each MODEL_MAGIC + pickle), so the
# engine cuts them apart without unpickling anything (operators/fitted.py `fold_states`).
FOLDS_MAGIC = b"treeml-folds\n"
# Fold models bigger than this together are not kept: the answer is fitted again instead.
# (Five folds of 300 unpruned extra trees on concrete's 824 rows: 125 MiB. Under the sandbox's
# SUBMISSION_CAP, the most of a file the engine reads back.)
FOLD_MODELS_CAP = 160 * 2**20

_HEAD = '''"""Solution script: the engine's harness around LLM-written model code.

Run it in a folder holding input/ (train.csv, valid.csv, test.csv); it writes
submission/valid.csv and submission/test.csv.
"""
import os
import re

import numpy as np
import pandas as pd

TARGET = __TARGET__
# Loaded as a saved model's module (operators/fitted.py), the script reads no rows and runs
# nothing: its definitions predict the rows they are given.
_treeml_main = __name__ != __MODULE__
if _treeml_main:
    train = pd.read_csv("input/train.csv")
    X = train.drop(columns=[TARGET])
    y = train[TARGET]
    X_valid = pd.read_csv("input/valid.csv")  # no target: predict every row
    X_test = pd.read_csv("input/test.csv")  # no target: predict every row


'''

_VALID_LINE = '    X_valid = pd.read_csv("input/valid.csv")  # no target: predict every row\n'
# Engine-written code only: every fold in one process, so it reads every dev label.
_FOLDS_LINE = ('    FOLDS = pd.read_csv("input/folds.csv")["fold"].to_numpy()  # fold of each '
               'train row; -1: never held out\n')


def harness_head(ctx: TaskContext, all_folds: bool = False) -> str:
    head = _HEAD.replace(_VALID_LINE, _FOLDS_LINE) if all_folds else _HEAD
    return (head + PREPARE_SOURCE).replace("__TARGET__", repr(ctx.target)).replace(
        "__MODULE__", repr(MODEL_MODULE))


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
        # The frame made once from its columns: adding a column to a frame costs about 0.1 ms,
        # paid per class and per fold model by a served one-row request.
        body = (
            "    if pred.ndim == 1:  # binary: probability of LABELS[1]\n"
            "        pred = np.column_stack([1 - pred, pred])\n"
            "    if pred.ndim != 2 or pred.shape[1] != len(LABELS):\n"
            "        raise ValueError(f\"fit_predict must return probabilities of shape \"\n"
            "                         f\"(rows, {len(LABELS)}) for {path}; got {pred.shape}\")\n"
            "    out = {\"prediction\": np.asarray(LABELS)[pred.argmax(axis=1)]}\n"
            "    for i, label in enumerate(LABELS):\n"
            f"        out[f\"{PROBA_PREFIX}{{label}}\"] = pred[:, i]\n"
            "    out = pd.DataFrame(out)\n"
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
        "def _treeml_predict(model, rows):  # a fitted make_model()'s, for a saved model\n"
        f"    return model.{'predict_proba' if ctx.needs_proba else 'predict'}(rows)\n\n\n"
    )


def harness_tail(ctx: TaskContext, all_folds: bool = False) -> str:
    if all_folds:
        keep = (_KEEP_FOLD_MODELS.replace("__MODULE__", repr(MODEL_MODULE))
                .replace("__MAGIC__", repr(MODEL_MAGIC)).replace("__FOLDS__", repr(FOLDS_MAGIC))
                .replace("__CAP__", str(FOLD_MODELS_CAP)))
        return (_frame_function(ctx) + HARNESS_MEASURE + _indented(keep)
                + _indented(_GATE) + _indented(_ALL_FOLDS_RUN))
    return (
        _frame_function(ctx)
        + "def _write(pred, rows, path):\n"
        "    _treeml_frame(pred, len(rows), path).to_csv(path, index=False)\n"
        + HARNESS_MEASURE
        + _indented(_RUN)
    )


def _indented(run: str) -> str:
    """The harness's run, which a saved model's module skips (see the head)."""
    lines = run.strip("\n").splitlines()
    return "\n\nif _treeml_main:\n" + "".join(f"    {line}\n" if line else "\n" for line in lines)


_RUN = """
_treeml_measure = _TreemlMeasure(len(X), len(X_valid), len(X_test))
_treeml_start = _treeml_time.perf_counter()
_treeml_sys.setprofile(_treeml_measure.hook)
try:
    valid_pred, test_pred = fit_predict(X.copy(), y.copy(), X_valid.copy(), X_test.copy())
finally:
    _treeml_sys.setprofile(None)
_treeml_seconds = _treeml_time.perf_counter() - _treeml_start
os.makedirs("submission", exist_ok=True)
_write(valid_pred, X_valid, "submission/valid.csv")
_write(test_pred, X_test, "submission/test.csv")
_treeml_measure.report(_treeml_seconds, valid_pred)
"""

# Every fold of the run in one process: out-of-fold predictions of the held-out rows in row
# order (submission/valid.csv), one block of test predictions per fold model with a `fold`
# column (submission/test.csv); the first fold's call is the one measured, and the gate's fits
# are timed apart (they are no part of the answer's refit: engine/evaluation/closing.py).
_ALL_FOLDS_RUN = """
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
if _treeml_fold_models is not None:
    _treeml_keep_fold_models(_treeml_fold_models)
_treeml_gate_seconds = None
if _treeml_gate is not None:
    _treeml_start = _treeml_time.perf_counter()
    _treeml_gate_write()
    _treeml_gate_seconds = _treeml_time.perf_counter() - _treeml_start
_treeml_measure.report(*_treeml_first, _treeml_gate_seconds)
"""

# A feature program's gate (operators/models.py gate_part): each (split, seed) of GATE_PAIRS
# fitted afresh, with and without the newest program, on every fold of its split (0: the run's
# folds; r: input/folds.csv's column gate<r>, or the run's folds where it has none, as on the
# holdout). submission/gate.csv holds one block of held-out predictions per pair and side
# (`fold`: block 2 * i for pair i with the program, 2 * i + 1 without; the even blocks alone
# when gate_models gives the side with the program alone), in held-out order as
# submission/valid.csv.
_GATE = """
_treeml_gate = globals().get("gate_models")


def _treeml_gate_write():
    splits, blocks = pd.read_csv("input/folds.csv"), []
    for i, (split, seed) in enumerate(GATE_PAIRS):
        column = f"gate{split}"
        fold_of = splits[column].to_numpy() if split and column in splits else FOLDS
        parts = {}
        for fold in sorted(set(fold_of[fold_of >= 0].tolist())):
            learn, held = fold_of != fold, fold_of == fold
            for arm, model in enumerate(_treeml_gate(seed)):
                model.fit(X[learn].reset_index(drop=True), y[learn].reset_index(drop=True))
                part = _treeml_frame(_treeml_predict(model, X[held].reset_index(drop=True)),
                                     int(held.sum()), "the held-out rows")
                part.index = np.flatnonzero(held)
                parts.setdefault(2 * i + arm, []).append(part)
        for block, frames in parts.items():
            frame = pd.concat(frames).sort_index()
            frame.insert(0, "fold", block)
            blocks.append(frame)
    pd.concat(blocks).to_csv("submission/gate.csv", index=False)

"""

# An all-folds run of make_model() code keeps each fold's fitted model: the answer's saved
# model is then ready without fitting it again (engine/deploy/saved_model.py). make_model is
# wrapped to see the models fit_predict makes; one per fold, or none is kept. The classes the
# script defines pickle under MODEL_MODULE, the name a saved model loads the script by.
_KEEP_FOLD_MODELS = """
def _treeml_keep_fold_models(made):
    import pickle

    if len(made) != len(set(FOLDS[FOLDS >= 0].tolist())) or len(made) < 2:
        return
    try:
        _treeml_sys.modules[__MODULE__] = _treeml_sys.modules[__name__]
        for value in list(globals().values()):
            if isinstance(value, type) and value.__module__ == __name__:
                value.__module__ = __MODULE__
        states = [__MAGIC__ + pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL) for m in made]
    except Exception as exc:  # the node is scored all the same; its answer is fitted again
        print(f"fold models not kept: {type(exc).__name__}: {exc}", file=_treeml_sys.stderr)
        return
    if sum(len(state) for state in states) <= __CAP__:
        with open("submission/fitted.pkl", "wb") as file:
            file.write(__FOLDS__ + " ".join(str(len(s)) for s in states).encode() + b"\\n")
            for state in states:
                file.write(state)


_treeml_fold_models = None
if "make_model" in globals():
    _treeml_fold_models, _treeml_make_model = [], make_model

    def make_model():
        _treeml_fold_models.append(_treeml_make_model())
        return _treeml_fold_models[-1]

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


def model_functions(ctx: TaskContext, model: str, after_fit: str = "") -> str:
    """`make_model()` returning `model` (an expression, an unfitted estimator) and the
    `fit_predict` that fits it and predicts (running `after_fit` between): the form of all
    engine-written model code, which a saved model keeps fitted (operators/fitted.py)."""
    return (
        "def make_model():\n"
        f"    return {model}\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    model = make_model().fit(X, y)\n"
        f"{after_fit}"
        f"    return {predict_call(ctx)}\n"
    )


def baseline_code(ctx: TaskContext) -> str:
    """The engine's own root: LightGBM with default settings on `prepare`d features."""
    kind = "LGBMRegressor" if ctx.task_type == "regression" else "LGBMClassifier"
    return "import lightgbm as lgb\n\n\n" + model_functions(
        ctx, f"Encoded(lgb.{kind}(random_state=0, verbose=-1))")


def ensemble_vote(ctx: TaskContext) -> bool:
    """Class labels alone cannot be averaged: such tasks ensemble by a weighted vote."""
    return ctx.task_type != "regression" and not ctx.needs_proba


def defines_make_model(code: str) -> bool:
    """Whether the model part of `code` defines `make_model()` at its top level."""
    try:
        tree = ast.parse(model_part(code))
    except SyntaxError:
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == "make_model" for n in tree.body)
