"""The answer's fitted state: run a solution once keeping every model it fitted, then run it on
new rows with those fits restored instead of trained again.

A solution is one `fit_predict(X, y, X_valid, X_test)` (operators/harness.py): fitting and
predicting are a single call, so no model object can be asked of it. `fitted_wrapper` is a
script that runs the unchanged solution (`input/solution.py`) with the `fit` method of every
scikit-learn-style estimator class wrapped (every `sklearn.base.BaseEstimator` subclass, which
covers LightGBM and XGBoost, and CatBoost):

- `save`: after each outermost `fit` (not one called by another fit, as a Pipeline or a
  search over settings calls its steps), the fitted estimator is pickled, in call order,
  into `submission/fitted.pkl`;
- `load`: the i-th outermost `fit` takes the attributes of the i-th saved estimator and
  returns at once. One
  process replays every saved model of the answer (`input/fitted-<i>.pkl`, learned from
  `input/train-<i>.csv`), each in a folder of its own, and writes their predictions as
  blocks with a `fold` column, as engine-written code that runs every fold does.

The solution reads the same training rows in both modes, so every step around the fits
(feature preparation, encodings learned from `y`) computes what it computed when saved, and
only the new rows differ. Code the wrapper cannot see (a model trained by a plain function,
a class defined in the solution with a home-made fit) simply runs again: slower, still right.
What could make a replay differ (a random generator the skipped fits no longer advance, a
step that depends on the predicted rows) is caught by the engine, which replays the saved
run on its own rows and keeps the state only if the predictions come out the same
(engine/fitted.py).

The state is a pickle written by generated code, which is code: it is loaded only by this
wrapper, inside the sandbox, never in the engine's process.
"""

from __future__ import annotations

SAVE, LOAD = "save", "load"
STATE_FILE = "fitted.pkl"  # written to submission/ by a save
FITTED_PREFIX = "fitted"  # a load reads input/fitted-<i>.pkl with input/train-<i>.csv, i = 0..
SOLUTION_FILE = "solution.py"  # the solution script, an input file of the wrapper
# A save that could not pickle a fit says why on this stderr line (and writes no state).
UNSAVED_MARK = "treeml-fitted: not saved: "

_WRAPPER = '''"""Runs input/solution.py, its model fits saved or restored (operators/fitted.py)."""
import builtins as _treeml_builtins
import functools as _treeml_functools
import pickle as _treeml_pickle
import sys as _treeml_sys

_TREEML_MODE = __MODE__
_treeml_states = []
_treeml_unsaved = []
_treeml_next = 0
_treeml_depth = 0
_treeml_wrapped = set()


def _treeml_name(obj):
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _treeml_wrap(cls):
    fit = cls.__dict__.get("fit")
    if not callable(fit) or cls in _treeml_wrapped:
        return
    _treeml_wrapped.add(cls)

    @_treeml_functools.wraps(fit)
    def fit_once(self, *args, **kwargs):
        global _treeml_next, _treeml_depth
        if _treeml_depth:  # a fit inside a fit: part of the outer one's state
            return fit(self, *args, **kwargs)
        if _TREEML_MODE == "load":
            if _treeml_next >= len(_treeml_states):
                raise RuntimeError("the saved model holds fewer fits than this run makes; "
                                   "predict with --refit")
            name, state = _treeml_states[_treeml_next]
            if name != _treeml_name(self):
                raise RuntimeError(f"saved fit {_treeml_next} is a {name}, this run fits a "
                                   f"{_treeml_name(self)}; predict with --refit")
            restored = _treeml_pickle.loads(state)
            self.__dict__.update(restored if isinstance(restored, dict) else restored.__dict__)
            _treeml_next += 1
            return self
        _treeml_depth += 1
        try:
            out = fit(self, *args, **kwargs)
        finally:
            _treeml_depth -= 1
        # The estimator itself, so its class's own pickling applies (CatBoost's model);
        # else its attributes (a class the solution defined cannot be found by name).
        state = b""
        for kept in (self, self.__dict__):
            try:
                state = _treeml_pickle.dumps(kept, protocol=_treeml_pickle.HIGHEST_PROTOCOL)
                break
            except Exception as exc:  # any pickling failure: the run goes on, unsaved
                failure = f"{_treeml_name(self)}: {type(exc).__name__}: {exc}"
        if not state:
            _treeml_unsaved.append(failure)
        _treeml_states.append((_treeml_name(self), state))
        return out

    cls.fit = fit_once


def _treeml_discover():
    # getattr: a module half-way through its own import has not defined its classes yet
    todo = [getattr(_treeml_sys.modules.get("sklearn.base"), "BaseEstimator", None),
            getattr(_treeml_sys.modules.get("catboost"), "CatBoost", None)]
    todo = [cls for cls in todo if cls is not None]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        _treeml_wrap(cls)


_treeml_import = _treeml_builtins.__import__
_treeml_importing = 0


def _treeml_import_and_discover(*args, **kwargs):
    # Classes come with modules, and a module's are all defined only once its outermost
    # import statement has returned.
    global _treeml_importing
    before = len(_treeml_sys.modules)
    _treeml_importing += 1
    try:
        module = _treeml_import(*args, **kwargs)
    finally:
        _treeml_importing -= 1
    if not _treeml_importing and len(_treeml_sys.modules) != before:
        _treeml_discover()
    return module


_treeml_builtins.__import__ = _treeml_import_and_discover
with open("input/__SOLUTION__", encoding="utf-8") as _treeml_file:
    _treeml_code = compile(_treeml_file.read(), "input/__SOLUTION__", "exec")


def _treeml_run():
    exec(_treeml_code, {"__name__": "__main__", "__file__": "input/__SOLUTION__",
                        "__builtins__": _treeml_builtins})


if _TREEML_MODE == "save":
    _treeml_run()
    if _treeml_unsaved or not _treeml_states:
        why = "; ".join(_treeml_unsaved) or "the solution fitted no scikit-learn-style model"
        print("__UNSAVED__" + why, file=_treeml_sys.stderr)
    else:
        with open("submission/__STATE__", "wb") as _treeml_file:
            _treeml_pickle.dump(_treeml_states, _treeml_file,
                                protocol=_treeml_pickle.HIGHEST_PROTOCOL)
else:
    # Every saved model in this one process (imports are paid once): model i runs in a
    # folder of its own whose input/train.csv is input/train-<i>.csv; its predictions join
    # submission/{valid,test}.csv as the block with `fold` i.
    import csv as _treeml_csv
    import os as _treeml_os

    _treeml_home = _treeml_os.getcwd()
    _treeml_out = {name: [] for name in ("valid.csv", "test.csv")}
    _treeml_count = 0
    while _treeml_os.path.exists(f"input/__FITTED__-{_treeml_count}.pkl"):
        _treeml_count += 1
    for _treeml_model in range(_treeml_count):
        _treeml_work = _treeml_os.path.join(_treeml_home, f"_treeml_model{_treeml_model}")
        _treeml_os.makedirs(_treeml_os.path.join(_treeml_work, "input"))
        _treeml_os.makedirs(_treeml_os.path.join(_treeml_work, "submission"))
        for _treeml_name_in, _treeml_name_to in ((f"train-{_treeml_model}.csv", "train.csv"),
                                                 ("valid.csv", "valid.csv"),
                                                 ("test.csv", "test.csv")):
            _treeml_os.symlink(_treeml_os.path.join(_treeml_home, "input", _treeml_name_in),
                               _treeml_os.path.join(_treeml_work, "input", _treeml_name_to))
        with open(f"input/__FITTED__-{_treeml_model}.pkl", "rb") as _treeml_file:
            _treeml_states = _treeml_pickle.load(_treeml_file)
        _treeml_next = 0
        _treeml_os.chdir(_treeml_work)
        try:
            _treeml_run()
        finally:
            _treeml_os.chdir(_treeml_home)
        if _treeml_next != len(_treeml_states):
            raise RuntimeError(f"model {_treeml_model + 1} restored {_treeml_next} of its "
                               f"{len(_treeml_states)} saved fits; predict with --refit")
        for _treeml_name_out, _treeml_rows in _treeml_out.items():
            with open(_treeml_os.path.join(_treeml_work, "submission", _treeml_name_out),
                      newline="", encoding="utf-8") as _treeml_file:
                _treeml_lines = list(_treeml_csv.reader(_treeml_file))
            if not _treeml_rows:
                _treeml_rows.append(["fold", *_treeml_lines[0]])
            _treeml_rows.extend([str(_treeml_model), *row] for row in _treeml_lines[1:])
    for _treeml_name_out, _treeml_rows in _treeml_out.items():
        with open(_treeml_os.path.join("submission", _treeml_name_out), "w", newline="",
                  encoding="utf-8") as _treeml_file:
            _treeml_csv.writer(_treeml_file, lineterminator="\\n").writerows(_treeml_rows)
_treeml_builtins.__import__ = _treeml_import
'''


def fitted_wrapper(mode: str) -> str:
    """The script that runs `input/solution.py` saving (SAVE) or restoring (LOAD) its fits."""
    if mode not in (SAVE, LOAD):
        raise ValueError(f"mode must be {SAVE!r} or {LOAD!r}, got {mode!r}")
    return (_WRAPPER.replace("__MODE__", repr(mode)).replace("__STATE__", STATE_FILE)
            .replace("__SOLUTION__", SOLUTION_FILE).replace("__UNSAVED__", UNSAVED_MARK)
            .replace("__FITTED__", FITTED_PREFIX))
