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
  returns at once. One process replays every saved model of the answer
  (`input/fitted-<i>.pkl`, learned from `input/train-<i>.csv`), each in a folder of its
  own, and writes their predictions as blocks with a `fold` column, as engine-written code
  that runs every fold does;
- `serve`: `load`, request after request, in a sandbox session (sandbox/_session.py): the
  interpreter, the imports and the saved states are loaded once, and each request pays only
  the solution's own steps with its fits restored.

The solution reads the same training rows in both modes, so every step around the fits
(feature preparation, encodings learned from `y`) computes what it computed when saved, and
only the new rows differ. Code the wrapper cannot see (a model trained by a plain function,
a class defined in the solution with a home-made fit) simply runs again: slower, still right.
What could make a replay differ (a random generator the skipped fits no longer advance, a
step that depends on the predicted rows) is caught by the engine, which replays the saved
run on its own rows and keeps the state only if the predictions come out the same
(engine/deploy/saved_model.py).

The state is a pickle written by generated code, which is code: it is loaded only by this
wrapper, inside the sandbox, never in the engine's process.
"""

from __future__ import annotations

from sandbox import REPLY_DIR, REPLY_FD_ENV, REQUEST_FILE

SAVE, LOAD, SERVE = "save", "load", "serve"
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
        if _TREEML_MODE != "save":
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
    # <out>/{valid,test}.csv as the block with `fold` i.
    import csv as _treeml_csv
    import os as _treeml_os

    _treeml_home = _treeml_os.getcwd()
    _treeml_models = []
    while _treeml_os.path.exists(f"input/__FITTED__-{len(_treeml_models)}.pkl"):
        with open(f"input/__FITTED__-{len(_treeml_models)}.pkl", "rb") as _treeml_file:
            _treeml_models.append(_treeml_pickle.load(_treeml_file))

    def _treeml_link(source, link):
        if _treeml_os.path.lexists(link):
            _treeml_os.unlink(link)
        _treeml_os.symlink(_treeml_os.path.join(_treeml_home, "input", source), link)

    def _treeml_replay(valid, test, out):
        global _treeml_states, _treeml_next
        blocks = {name: [] for name in ("valid.csv", "test.csv")}
        for model, states in enumerate(_treeml_models):
            work = _treeml_os.path.join(_treeml_home, f"_treeml_model{model}")
            for sub in ("input", "submission"):
                _treeml_os.makedirs(_treeml_os.path.join(work, sub), exist_ok=True)
            for source, name in ((f"train-{model}.csv", "train.csv"), (valid, "valid.csv"),
                                 (test, "test.csv")):
                _treeml_link(source, _treeml_os.path.join(work, "input", name))
            _treeml_states, _treeml_next = states, 0
            _treeml_os.chdir(work)
            try:
                _treeml_run()
            finally:
                _treeml_os.chdir(_treeml_home)
            if _treeml_next != len(states):
                raise RuntimeError(f"model {model + 1} restored {_treeml_next} of its "
                                   f"{len(states)} saved fits; predict with --refit")
            for name, rows in blocks.items():
                with open(_treeml_os.path.join(work, "submission", name), newline="",
                          encoding="utf-8") as file:
                    lines = list(_treeml_csv.reader(file))
                if not rows:
                    rows.append(["fold", *lines[0]])
                rows.extend([str(model), *row] for row in lines[1:])
        _treeml_os.makedirs(out, exist_ok=True)
        for name, rows in blocks.items():
            with open(_treeml_os.path.join(out, name), "w", newline="",
                      encoding="utf-8") as file:
                _treeml_csv.writer(file, lineterminator="\\n").writerows(rows)

    if _TREEML_MODE == "load":
        _treeml_replay("valid.csv", "test.csv", "submission")
    else:
        # A session (sandbox/_session.py): request n is input/__REQUEST__, its answer
        # submission/__REPLY__/valid.csv; the solution's own prints stay on stdout/stderr.
        import traceback as _treeml_traceback

        _treeml_reply = _treeml_os.fdopen(int(_treeml_os.environ["__REPLY_FD__"]), "w",
                                          buffering=1)
        for _treeml_line in _treeml_sys.stdin:
            _treeml_n = _treeml_line.strip()
            try:
                _treeml_replay("__REQUEST__".format(n=_treeml_n),
                               "__REQUEST__".format(n=_treeml_n),
                               _treeml_os.path.join("submission",
                                                    "__REPLY__".format(n=_treeml_n)))
            except BaseException as _treeml_exc:  # the solution's failure is a reply
                _treeml_traceback.print_exc()
                _treeml_why = (str(_treeml_exc).strip().splitlines() or [""])[0][:300]
                _treeml_reply.write(f"error {type(_treeml_exc).__name__}: {_treeml_why}\\n")
            else:
                _treeml_reply.write(f"ok {_treeml_n}\\n")
_treeml_builtins.__import__ = _treeml_import
'''


def fitted_wrapper(mode: str) -> str:
    """The script that runs `input/solution.py` saving (SAVE) or restoring (LOAD) its fits,
    or restoring them to answer request after request in a sandbox session (SERVE)."""
    if mode not in (SAVE, LOAD, SERVE):
        raise ValueError(f"mode must be {SAVE!r}, {LOAD!r} or {SERVE!r}, got {mode!r}")
    return (_WRAPPER.replace("__MODE__", repr(mode)).replace("__STATE__", STATE_FILE)
            .replace("__SOLUTION__", SOLUTION_FILE).replace("__UNSAVED__", UNSAVED_MARK)
            .replace("__FITTED__", FITTED_PREFIX).replace("__REQUEST__", REQUEST_FILE)
            .replace("__REPLY_FD__", REPLY_FD_ENV).replace("__REPLY__", REPLY_DIR))
