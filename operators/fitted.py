"""The answer's fitted state, saved once, so predicting new rows trains nothing.

Two forms, by what the solution defines (operators/harness.py):

- **A fit and a predict** (`make_model()`, all engine-written code): `save` loads the
  solution as a module (its head reads no rows, its run is skipped), fits `make_model()` on
  input/train.csv, predicts valid and test with it, and pickles the fitted object whole
  (`MODEL_MAGIC` + pickle), kept only if the unpickled object predicts the test rows exactly
  as the fitted one did (checked in the same process). `load` and `serve` load the module
  once and only predict: no training rows are read on a call. Its classes (`Encoded`,
  `Ensemble`) pickle by the module's name, so a saved model needs its own solution.py,
  which the saved answer ships.
- **A replay** (LLM-written `fit_predict`, which fits and predicts in one call): the wrapper
  runs the unchanged solution with the `fit` method of every scikit-learn-style estimator
  class wrapped (every `sklearn.base.BaseEstimator` subclass, which covers LightGBM and
  XGBoost, and CatBoost). `save` pickles each outermost fitted estimator in call order (not
  a fit called by another fit, as a Pipeline calls its steps); `load` gives the i-th
  outermost `fit` the attributes of the i-th saved estimator and returns at once, the
  solution reading the same training rows, so every step around the fits computes what it
  computed when saved. Code the wrapper cannot see (a class defined in the solution with a
  home-made fit) simply runs again: slower, still right.

Either way, `load` predicts with every saved model of the answer (`input/fitted-<i>.pkl`; a
replay's learned from `input/train-<i>.csv`) in one process and writes their predictions as
blocks with a `fold` column, as engine-written code that runs every fold does; `serve` does
so request after request in a sandbox session (sandbox/_session.py), the interpreter, the
imports and the states loaded once. What could make a replay differ from its save (a random
step outside the fits, a step that depends on the predicted rows) is caught by the engine,
which replays the saved fits on their own rows and keeps them only if the predictions come
out the same (engine/deploy/saved_model.py). `time` loads fitted make_model()s the same way
and times them on one row, warm (engine/evaluation/latency.py).

The state is a pickle written by generated code, which is code: it is loaded only by this
wrapper, inside the sandbox, never in the engine's process.
"""

from __future__ import annotations

from operators.harness import FOLDS_MAGIC, MODEL_MAGIC, MODEL_MODULE
from sandbox import REPLY_DIR, REPLY_FD_ENV, REQUEST_FILE, SUBMISSION_CAP

SAVE, LOAD, SERVE, COMPOSE, TIME = "save", "load", "serve", "compose", "time"
STATE_FILE = "fitted.pkl"  # written to submission/ by a save
FITTED_PREFIX = "fitted"  # a load reads input/fitted-<i>.pkl with input/train-<i>.csv, i = 0..
SOLUTION_FILE = "solution.py"  # the solution script, an input file of the wrapper
# A save that could not pickle a fit says why on this stderr line (and writes no state).
UNSAVED_MARK = "treeml-fitted: not saved: "
# A compose run reads the fold models scoring kept as input/kept-<member>-<fold>.pkl.
KEPT_PREFIX = "kept"
# A time run's line on stdout: this, then JSON (`timings`).
LATENCY_MARK = "treeml-latency: "
# A time run's calls per group after its warm-up: TIME_CALLS, or fewer once TIME_SECONDS are spent
# (at least 3), so a slow group costs under a second, not minutes.
TIME_CALLS, TIME_SECONDS = 15, 0.5

_WRAPPER = '''"""Runs input/solution.py, its model fits saved or restored (operators/fitted.py)."""
import ast as _treeml_ast
import builtins as _treeml_builtins
import os as _treeml_os
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
    _treeml_source = _treeml_file.read()
_treeml_code = compile(_treeml_source, "input/__SOLUTION__", "exec")


def _treeml_run():
    exec(_treeml_code, {"__name__": "__main__", "__file__": "input/__SOLUTION__",
                        "__builtins__": _treeml_builtins})


def _treeml_module():
    # The solution as the module MODEL_MODULE (operators/harness.py): its head reads no rows
    # and its run is skipped; a fitted make_model() pickles its classes by that name.
    import types as _treeml_types

    module = _treeml_types.ModuleType(__MODULE__)
    module.__file__ = "input/__SOLUTION__"
    _treeml_sys.modules[__MODULE__] = module
    exec(_treeml_code, module.__dict__)
    return module


def _treeml_predict_into(module, models, sources, out):
    # Each source's rows predicted by every model: blocks with a `fold` column, as a replay
    # writes them. Written by the csv module, the values as pandas' to_csv writes them
    # (floats by repr, missing as empty): stacking frames and to_csv cost a served one-row
    # request more than its reading (benchmarks/results/latency-ensemble-2026-12-07).
    import csv as _treeml_csv
    import pandas as _treeml_pd

    _treeml_os.makedirs(out, exist_ok=True)
    for name, source in sources:
        rows = _treeml_pd.read_csv(_treeml_os.path.join("input", source))
        header, lines = None, []
        for fold, model in enumerate(models):
            frame = module._treeml_frame(module._treeml_predict(model, rows.copy()), len(rows),
                                         source)
            header = header or ["fold", *frame.columns]
            columns = [[_treeml_cell(v) for v in frame[c].tolist()] for c in frame.columns]
            lines.extend([fold, *values] for values in zip(*columns))
        with open(_treeml_os.path.join(out, name), "w", newline="", encoding="utf-8") as file:
            writer = _treeml_csv.writer(file, lineterminator="\\n")
            writer.writerow(header)
            writer.writerows(lines)


def _treeml_cell(value):
    # A missing value (NaN, None) is an empty field, as to_csv writes it.
    return "" if value is None or value != value else value


def _treeml_kept_groups():
    # The kept models of input/__KEPT__-<group>-<model>.pkl, a list per group in order (a
    # node's, or an ensemble member's, fold models); read after the module that unpickles them.
    groups = []
    while _treeml_os.path.exists(f"input/__KEPT__-{len(groups)}-0.pkl"):
        models = []
        while _treeml_os.path.exists(path := f"input/__KEPT__-{len(groups)}-{len(models)}.pkl"):
            with open(path, "rb") as file:
                models.append(_treeml_pickle.loads(file.read()[len(__MAGIC__):]))
        groups.append(models)
    return groups


_treeml_model_form = any(isinstance(node, _treeml_ast.FunctionDef) and node.name == "make_model"
                         for node in _treeml_ast.parse(_treeml_source).body)

if _TREEML_MODE == "save" and _treeml_model_form:
    # A fit and a predict: the fitted make_model() is the state, saved whole.
    _treeml_builtins.__import__ = _treeml_import
    import pandas as _treeml_pd

    _treeml_solution = _treeml_module()
    _treeml_train = _treeml_pd.read_csv("input/train.csv")
    _treeml_model = _treeml_solution.make_model()
    _treeml_model.fit(_treeml_train.drop(columns=[_treeml_solution.TARGET]),
                      _treeml_train[_treeml_solution.TARGET])
    _treeml_os.makedirs("submission", exist_ok=True)

    def _treeml_predicted(model, rows, name):
        return _treeml_solution._treeml_frame(_treeml_solution._treeml_predict(
            model, rows.copy()), len(rows), name)

    for _treeml_name_ in ("valid.csv", "test.csv"):
        _treeml_rows_ = _treeml_pd.read_csv(f"input/{_treeml_name_}")
        _treeml_written = _treeml_predicted(_treeml_model, _treeml_rows_, _treeml_name_)
        _treeml_written.to_csv(f"submission/{_treeml_name_}", index=False)
    # The state is checked here, in the process that made it: the model it unpickles must
    # predict the test rows exactly as the fitted one did (no second run to replay it).
    # Pickled into a buffer that stops at the size the engine reads back: a model over it
    # cannot be saved anyway, and pickling it whole ran out of memory (a diamonds ensemble
    # with forests fitted on 43,000 rows, benchmarks/results/latency-arrays-2026-12-07).
    import io as _treeml_io

    class _TreemlTooBig(Exception):
        pass

    class _TreemlCapped(_treeml_io.BytesIO):
        def write(self, data):
            if self.tell() + memoryview(data).nbytes >= __STATE_CAP__ - len(__MAGIC__):
                raise _TreemlTooBig(f"the fitted model takes over {__STATE_CAP__ >> 20} MiB")
            return super().write(data)

    try:
        _treeml_buffer = _TreemlCapped()
        _treeml_pickle.dump(_treeml_model, _treeml_buffer,
                            protocol=_treeml_pickle.HIGHEST_PROTOCOL)
        _treeml_state = _treeml_buffer.getvalue()
        del _treeml_buffer
        _treeml_same = _treeml_predicted(_treeml_pickle.loads(_treeml_state), _treeml_rows_,
                                         _treeml_name_).equals(_treeml_written)
    except _TreemlTooBig as _treeml_exc:
        print(f"__UNSAVED__{_treeml_exc}", file=_treeml_sys.stderr)
    except Exception as _treeml_exc:  # any pickling failure: the answer stays unsaved
        print(f"__UNSAVED__{type(_treeml_exc).__name__}: {_treeml_exc}", file=_treeml_sys.stderr)
    else:
        if _treeml_same:
            with open("submission/__STATE__", "wb") as _treeml_file:
                _treeml_file.write(__MAGIC__ + _treeml_state)
        else:
            print("__UNSAVED__the unpickled model changed its test predictions",
                  file=_treeml_sys.stderr)
elif _TREEML_MODE == "compose":
    # The fold models scoring kept (a fitted make_model() per member and fold): each member's
    # predictions of the test rows, blocks with `fold` = member * folds + fold, for the engine
    # to check against what the member scored; then the answer's model of each fold, the
    # members' put together when the solution is an ensemble, kept as the scoring run keeps
    # fold models (FOLDS_MAGIC).
    _treeml_builtins.__import__ = _treeml_import
    _treeml_solution = _treeml_module()
    _treeml_members = _treeml_kept_groups()
    _treeml_predict_into(_treeml_solution, [m for folds in _treeml_members for m in folds],
                         (("test.csv", "test.csv"),), "submission")
    if hasattr(_treeml_solution, "Ensemble"):
        _treeml_answer = [_treeml_solution.Ensemble(list(models))
                          for models in zip(*_treeml_members)]
    else:
        (_treeml_answer,) = _treeml_members
    _treeml_states_ = [__MAGIC__ + _treeml_pickle.dumps(m, protocol=_treeml_pickle.HIGHEST_PROTOCOL)
                       for m in _treeml_answer]
    with open("submission/__STATE__", "wb") as _treeml_file:
        _treeml_file.write(__FOLDS__ + " ".join(str(len(s)) for s in _treeml_states_).encode()
                           + b"\\n" + b"".join(_treeml_states_))
elif _TREEML_MODE == "time":
    # The warm one-row latency of each group of kept models (input/kept-<group>-<model>.pkl: a
    # node's fold models, all of which a served request predicts with), and of each member of
    # an Ensemble among them; and a request's own work without models (reading its CSV,
    # writing the reply's blocks). Milliseconds, one JSON line on stdout.
    import json as _treeml_json
    import time as _treeml_time

    _treeml_builtins.__import__ = _treeml_import
    _treeml_solution = _treeml_module()
    _treeml_groups = _treeml_kept_groups()
    import pandas as _treeml_pd

    _treeml_row = _treeml_pd.read_csv("input/test.csv").head(1)

    def _treeml_p50(call):
        call()
        call()  # warm: first calls fill caches and lazy imports
        times = []
        while len(times) < __CALLS__ and (len(times) < 3 or sum(times) < __SECONDS__):
            start = _treeml_time.perf_counter()
            call()
            times.append(_treeml_time.perf_counter() - start)
        return 1000 * sorted(times)[len(times) // 2]

    def _treeml_predict_all(models):
        return [_treeml_solution._treeml_predict(m, _treeml_row.copy()) for m in models]

    class _TreemlFixed:  # a model whose prediction is ready: a request's work without models
        def __init__(self, pred):
            self.pred = pred

        def predict(self, rows):
            return self.pred

        predict_proba = predict

    _treeml_timed = []
    for _treeml_models_ in _treeml_groups:
        _treeml_entry = {"ms": _treeml_p50(lambda: _treeml_predict_all(_treeml_models_))}
        _treeml_ensemble = getattr(_treeml_solution, "Ensemble", None)
        if _treeml_ensemble is not None and isinstance(_treeml_models_[0], _treeml_ensemble):
            _treeml_entry["members"] = [_treeml_p50(lambda j=j: _treeml_predict_all(
                [m.members[j] for m in _treeml_models_]))
                for j in range(len(_treeml_models_[0].members))]
        _treeml_timed.append(_treeml_entry)
    _treeml_fixed = [_TreemlFixed(p) for p in _treeml_predict_all(max(_treeml_groups, key=len))]
    _treeml_request = _treeml_p50(lambda: _treeml_predict_into(
        _treeml_solution, _treeml_fixed, (("test.csv", "test.csv"),), "_treeml_request"))
    print(__LATENCY__ + _treeml_json.dumps({"request_ms": _treeml_request,
                                            "groups": _treeml_timed}), flush=True)
elif _TREEML_MODE == "save":
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

    _treeml_home = _treeml_os.getcwd()
    _treeml_models = []
    while _treeml_os.path.exists(f"input/__FITTED__-{len(_treeml_models)}.pkl"):
        with open(f"input/__FITTED__-{len(_treeml_models)}.pkl", "rb") as _treeml_file:
            _treeml_models.append(_treeml_file.read())
    if _treeml_model_form and all(m.startswith(__MAGIC__) for m in _treeml_models):
        # Fitted make_model()s: predicting reads no training rows and fits nothing.
        _treeml_builtins.__import__ = _treeml_import
        _treeml_solution = _treeml_module()
        _treeml_models = [_treeml_pickle.loads(m[len(__MAGIC__):]) for m in _treeml_models]
    else:
        _treeml_solution = None
        _treeml_models = [_treeml_pickle.loads(m) for m in _treeml_models]

    def _treeml_link(source, link):
        if _treeml_os.path.lexists(link):
            _treeml_os.unlink(link)
        _treeml_os.symlink(_treeml_os.path.join(_treeml_home, "input", source), link)

    def _treeml_replay(valid, test, out):
        # <out>/valid.csv of the rows of input/<valid>, and <out>/test.csv of input/<test>
        # unless `test` is None (a session's reply is valid.csv alone).
        global _treeml_states, _treeml_next
        sources = (("valid.csv", valid),) + ((("test.csv", test),) if test else ())
        if _treeml_solution is not None:
            _treeml_predict_into(_treeml_solution, _treeml_models, sources, out)
            return
        blocks = {name: [] for name, _ in sources}
        for model, states in enumerate(_treeml_models):
            work = _treeml_os.path.join(_treeml_home, f"_treeml_model{model}")
            for sub in ("input", "submission"):
                _treeml_os.makedirs(_treeml_os.path.join(work, sub), exist_ok=True)
            for source, name in ((f"train-{model}.csv", "train.csv"), (valid, "valid.csv"),
                                 (test or valid, "test.csv")):  # the solution reads both
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
                _treeml_replay("__REQUEST__".format(n=_treeml_n), None,
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


def fitted_objects(states: list[bytes]) -> bool:
    """Whether saved states are fitted make_model() objects (which predict from the state
    alone, reading no training rows) rather than a replay's fits."""
    return all(state.startswith(MODEL_MAGIC) for state in states)


def fold_states(blob: bytes | None) -> list[bytes] | None:
    """The fold models in a FOLDS_MAGIC container (an all-folds scoring run's or a compose
    run's submission/fitted.pkl), cut apart without unpickling; None when `blob` is not a
    whole one."""
    if blob is None or not blob.startswith(FOLDS_MAGIC):
        return None
    header, _, body = blob[len(FOLDS_MAGIC):].partition(b"\n")
    try:
        sizes = [int(size) for size in header.split()]
    except ValueError:
        return None
    if not sizes or sum(sizes) != len(body):
        return None
    states, start = [], 0
    for size in sizes:
        states.append(body[start:start + size])
        start += size
    return states if fitted_objects(states) else None


def fitted_wrapper(mode: str) -> str:
    """The script that runs `input/solution.py` saving (SAVE) or restoring (LOAD) its fits,
    restoring them to answer request after request in a sandbox session (SERVE), putting
    the answer's model together from the fold models scoring kept (COMPOSE), or timing kept
    models on one row (TIME)."""
    if mode not in (SAVE, LOAD, SERVE, COMPOSE, TIME):
        raise ValueError(f"mode must be {SAVE!r}, {LOAD!r}, {SERVE!r}, {COMPOSE!r} or "
                         f"{TIME!r}, got {mode!r}")
    return (_WRAPPER.replace("__MODE__", repr(mode)).replace("__STATE__", STATE_FILE)
            .replace("__SOLUTION__", SOLUTION_FILE).replace("__UNSAVED__", UNSAVED_MARK)
            .replace("__FITTED__", FITTED_PREFIX).replace("__REQUEST__", REQUEST_FILE)
            .replace("__REPLY_FD__", REPLY_FD_ENV).replace("__REPLY__", REPLY_DIR)
            .replace("__MODULE__", repr(MODEL_MODULE)).replace("__MAGIC__", repr(MODEL_MAGIC))
            .replace("__KEPT__", KEPT_PREFIX).replace("__FOLDS__", repr(FOLDS_MAGIC))
            .replace("__LATENCY__", repr(LATENCY_MARK)).replace("__CALLS__", str(TIME_CALLS))
            .replace("__SECONDS__", repr(TIME_SECONDS))
            .replace("__STATE_CAP__", str(SUBMISSION_CAP)))
