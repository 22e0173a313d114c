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

# The harness's feature preparation; the non-LLM benchmark baselines exec it in-process, so they
# see exactly the features every candidate gets from `prepare()`.
PREPARE_SOURCE = '''class Encoded:
    """The harness's features as a model step. `fit` learns from the training rows alone which
    columns are text, their common values and the fill of missing values; `transform`
    encodes any rows the same way (one-hot text, numbers, identical column names), so the
    columns never depend on the rows predicted. A model whose `fit` takes `cat_features`
    (CatBoost's ordered target statistics) gets a text column with more levels than the one-hot
    keeps as it is, as strings. With a `model`, `predict` and `predict_proba` are the model's
    on the encoded rows; with `programs` (kept feature programs, operators/features.py), they
    are applied first."""

    def __init__(self, model=None, programs=(), max_levels=20):
        self.model, self.programs, self.max_levels = model, list(programs), max_levels

    def fit(self, X, y=None):
        import inspect

        X = apply_programs(X, self.programs)
        self.columns_ = list(X.columns)
        text = list(X.select_dtypes(exclude="number").columns)
        native = self.model is not None and "cat_features" in inspect.signature(
            self.model.fit).parameters
        # One-hot where it keeps every level: on credit-g (13 text columns of at most 10 levels)
        # CatBoost took 5 times as long with them as categorical features, for the same AUC.
        self.text_ = [c for c in text if X[c].nunique() > self.max_levels] if native else []
        self.levels_ = {}
        for col in text:  # ids and free text would explode the one-hot
            if col not in self.text_:
                self.levels_[col] = [v for v in X[col].value_counts().index[:self.max_levels]
                                     if v != "other"] + ["other"]
        frame = self._one_hot(X)
        # A column without a median (never filled in training) is filled with 0.
        self.fill_ = np.nan_to_num(frame.drop(columns=self.text_).median().to_numpy(
            dtype=float), nan=0.0)
        names, seen = [], set()
        for col in frame.columns:  # lightgbm rejects some characters in feature names
            name = re.sub(r"[^0-9A-Za-z_]", "_", str(col))
            while name in seen:
                name += "_"
            seen.add(name)
            names.append(name)
        self.names_ = names
        if self.model is not None:
            params = self.model.get_params() if hasattr(self.model, "get_params") else {}
            for key, value in params.items():  # no more neighbours than training rows
                if key.split("__")[-1] == "n_neighbors" and isinstance(value, int):
                    self.model.set_params(**{key: min(value, len(X))})
            cats = {"cat_features": [n for n, c in zip(names, frame.columns) if c in self.text_]}
            self.model.fit(self._finish(frame), y, **(cats if native else {}))
        return self

    def _one_hot(self, X):
        frame = X.reindex(columns=self.columns_)
        kinds = frame.dtypes  # once: a column lookup costs as much as one row's prediction
        text = getattr(self, "text_", ())  # none in a model saved before text_ existed
        for col in self.columns_:
            if col in text:  # as strings, a missing one "nan"
                frame[col] = frame[col].astype(str).where(frame[col].notna(), "nan")
            elif col in self.levels_:  # missing: a column of its own
                known = frame[col].isin(self.levels_[col]) | frame[col].isna()
                frame[col] = pd.Categorical(frame[col].where(known, "other"),
                                            categories=self.levels_[col])
            elif not pd.api.types.is_numeric_dtype(kinds[col]):
                frame[col] = pd.to_numeric(frame[col], errors="coerce")
        if not self.levels_:
            return frame
        return pd.get_dummies(frame, columns=list(self.levels_), dummy_na=True, dtype=float)

    def _arrays(self, X):
        # `_one_hot`'s values as arrays, column for column: pandas' Categorical and get_dummies
        # took 34 of a one-row call's 50 ms on credit-g's 13 text columns. Numbers first, then
        # each text column's levels and its missing-value column, as get_dummies orders them.
        frame = X.reindex(columns=self.columns_)
        kinds = frame.dtypes
        numbers = [col for col in self.columns_ if col not in self.levels_]
        for col in numbers:  # numbers written as text
            if not pd.api.types.is_numeric_dtype(kinds[col]):
                frame[col] = pd.to_numeric(frame[col], errors="coerce")
        if not self.levels_:  # no column selected: each selection copies the frame
            return frame.to_numpy(dtype=float, na_value=np.nan)
        blocks = [frame[numbers].to_numpy(dtype=float, na_value=np.nan)]
        rows = np.arange(len(frame))
        for col, texts in zip(self.levels_, frame[list(self.levels_)].to_numpy(dtype=object).T):
            levels = self.levels_[col]  # the last is "other", for a value never seen
            index = {level: i for i, level in enumerate(levels)}
            codes = np.fromiter((index.get(v, len(levels) - 1) for v in texts), int, len(texts))
            codes[pd.isna(texts)] = len(levels)
            block = np.zeros((len(frame), len(levels) + 1))
            block[rows, codes] = 1.0
            blocks.append(block)
        return np.hstack(blocks)

    def _filled(self, frame):
        values = (frame if isinstance(frame, np.ndarray)
                  else frame.to_numpy(dtype=float, na_value=np.nan))
        return np.where(np.isnan(values), self.fill_, values)

    def _finish(self, frame):
        text = getattr(self, "text_", ())
        if not text:
            return pd.DataFrame(self._filled(frame), index=frame.index, columns=self.names_)
        numbers = [col for col in frame.columns if col not in text]
        out = frame.copy()
        out[numbers] = self._filled(frame[numbers])
        out.columns = self.names_
        return out

    def _encoded(self, X):
        return self._one_hot(apply_programs(X, self.programs))

    def transform(self, X):
        if getattr(self, "text_", ()):  # text kept as text: the frame's own way
            return self._finish(self._encoded(X))
        frame = apply_programs(X, self.programs)
        return pd.DataFrame(self._filled(self._arrays(frame)), index=frame.index,
                            columns=self.names_)

    def _matrix(self, X):  # transform's values without their frame, for a booster
        if getattr(self, "text_", ()):
            return self._filled(self._encoded(X))
        return self._filled(self._arrays(apply_programs(X, self.programs)))

    def _booster(self):
        # A fitted LightGBM scikit-learn model predicts through its booster, as its own
        # predict does after reading back every parameter (get_params, deepcopy: about 1 ms a
        # call, more than a one-row request's trees); a custom objective keeps its own path.
        if type(self.model).__module__.split(".")[0] != "lightgbm":
            return None
        if callable(getattr(self.model, "objective_", None)):
            return None
        return getattr(self.model, "booster_", None)

    def _trees(self):
        # A fitted scikit-learn forest predicts through its trees' arrays, summed in its order
        # as its own predict sums them (the same floats): that predict hands each tree to
        # joblib, 31 ms for one row through 300 trees against 1.5 ms (under load, one thread).
        if not type(self.model).__module__.startswith("sklearn.ensemble._forest"):
            return None
        if getattr(self.model, "n_outputs_", None) != 1:
            return None
        return [tree.tree_ for tree in getattr(self.model, "estimators_", ())] or None

    def _forest(self, trees, X):  # the forest's mean of its trees' values, as its predict
        matrix = np.ascontiguousarray(self._matrix(X), dtype=np.float32)
        classes = getattr(self.model, "n_classes_", None)
        out = np.zeros((len(matrix), classes) if classes else len(matrix))
        for tree in trees:
            out += tree.predict(matrix)[:, :classes] if classes else tree.predict(matrix)[:, 0]
        return out / len(trees)

    def _features(self, X):
        # CatBoost predicts a matrix as it predicts the frame, without making a Pool of a frame:
        # 0.2 against 0.45 ms a one-row call (a frame only for the text columns it takes).
        plain = (type(self.model).__module__.split(".")[0] == "catboost"
                 and not getattr(self, "text_", ()))
        return self._matrix(X) if plain else self.transform(X)

    def predict(self, X):
        booster, trees = self._booster(), self._trees()
        if trees is not None and not hasattr(self.model, "classes_"):
            return self._forest(trees, X)
        if booster is None and trees is None:
            return self.model.predict(self._features(X))
        if not hasattr(self.model, "classes_"):
            return booster.predict(self._matrix(X))
        return np.asarray(self.model.classes_)[self.predict_proba(X).argmax(axis=1)]

    def predict_proba(self, X):
        trees = self._trees()
        if trees is not None:
            return self._forest(trees, X)
        booster = self._booster()
        if booster is None:
            return self.model.predict_proba(self._features(X))
        proba = booster.predict(self._matrix(X))
        return proba if proba.ndim == 2 else np.column_stack([1.0 - proba, proba])


def prepare(X, X_valid, X_test, max_levels=20):
    """One-hot encode text columns and fill missing values the same way for all three
    frames, from the training rows alone (so the columns never depend on the rows
    predicted); returns three numeric DataFrames with identical columns."""
    encoded = Encoded(max_levels=max_levels).fit(X)
    return encoded.transform(X), encoded.transform(X_valid), encoded.transform(X_test)


def apply_programs(frame, programs):
    """`frame` with feature programs (sources defining add_features) applied in order."""
    import datetime
    import math

    for source in programs:
        scope = {"np": np, "pd": pd, "math": math, "re": re, "datetime": datetime}
        exec(compile(source, "feature program", "exec"), scope)
        frame = scope["add_features"](frame.copy())
        if isinstance(frame, pd.DataFrame):
            frame = frame.replace([np.inf, -np.inf], np.nan)
    return frame
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
# column (submission/test.csv); the first fold's call is the one measured.
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
_treeml_measure.report(*_treeml_first)
if _treeml_fold_models is not None:
    _treeml_keep_fold_models(_treeml_fold_models)
if _treeml_gate is not None:
    _treeml_gate_write()
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
