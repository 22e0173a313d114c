"""The fold models scoring already fitted, kept for the answer's saved model (issue 43, item 2):
an all-folds scoring run of make_model() code keeps one fitted model per fold
(operators/harness.py), and the answer's model is put together from them in the real sandbox
(engine/deploy/saved_model.py `compose_answer`) instead of being fitted again. Stored cases in
the engine's earlier form run as make_model() code (operators/kinds/cases.py)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.deploy.bundle import export_model
from engine.deploy.saved_model import (
    COMPOSE_SHARE_OF_CAP,
    answer_candidates,
    compose_answer,
    compose_runs,
    replay_inputs,
)
from engine.evaluation.folds import Folds, all_folds_inputs, dev_labels, make_folds
from engine.evaluation.scoring import (
    combine_predictions,
    frame_csv,
    read_stacked,
    read_submission,
    score_held_out,
)
from engine.evaluation.select import one_at_a_time
from engine.predict import main as predict_main
from engine.predict import served_one_row_ms
from engine.records.store import RunStore
from engine.records.summary import model_lines
from engine.run import main as run_main
from engine.search_run import task_context
from engine.task.prepare import PreparedTask, TaskSpec, csv_bytes, prepare_task
from operators.context import TaskContext
from operators.fitted import LOAD, fitted_wrapper, fold_states
from operators.harness import FOLDS_MAGIC, MODEL_MAGIC, assemble
from operators.kinds.cases import engine_form
from operators.kinds.ensemble import ensemble_code, ensemble_written
from operators.models import model_code
from sandbox import ExecResult, Limits, run_script
from search.journal import Journal
from search.node import Operator
from tests.helpers import make_data, make_node
from tests.test_closing import ensemble_of
from tests.test_fitted import LIMITS

MEMBERS = [("lgbm", {"n_estimators": 30}), ("knn", {"n_neighbors": 7})]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    tmp = tmp_path_factory.mktemp("kept")
    make_data(tmp / "d.csv", rows=240)
    return prepare_task(TaskSpec(data=tmp / "d.csv", target="y"))


def scored(task: PreparedTask, folds: Folds, model: str) -> tuple[ExecResult, bytes]:
    """An all-folds scoring run of `model` and its test predictions as the node keeps them."""
    ctx = task_context(task, 0)
    result = run_script(assemble(ctx, model, all_folds=True), all_folds_inputs(task, folds),
                        LIMITS)
    assert result.status == "ok", result.stderr_tail
    held = folds.held_out
    valid = [read_submission(task, result.valid_csv, "valid", len(held))]
    tests = read_stacked(task, result.test_csv, "test", len(task.test_X), folds.k)
    kept = score_held_out(task, dev_labels(task).iloc[held], valid, [held], tests)
    return result, frame_csv(task, kept.test)


def kept_members(task: PreparedTask, folds: Folds, members: Sequence[tuple[str, dict[str, Any]]]
                 ) -> tuple[list[str], list[list[bytes]], list[bytes]]:
    """Each (family, params) member's solution code, its kept fold models from an all-folds
    scoring run, and its test predictions as its node keeps them."""
    ctx = task_context(task, 0)
    codes, states, tests = [], [], []
    for family, params in members:
        model = model_code(ctx, family, params)
        result, test = scored(task, folds, model)
        kept = fold_states(result.fitted)
        assert kept is not None
        codes.append(assemble(ctx, model))
        states.append(kept)
        tests.append(test)
    return codes, states, tests


def test_an_all_folds_run_keeps_one_fitted_model_per_fold(task: PreparedTask) -> None:
    ctx = task_context(task, 0)
    folds = make_folds(task, 3)
    result, _ = scored(task, folds, model_code(ctx, "lgbm", {"n_estimators": 20}))
    states = fold_states(result.fitted)
    assert states is not None and len(states) == 3
    assert all(state.startswith(MODEL_MAGIC) for state in states)
    assert len(set(states)) == 3  # each fold's own model
    # Code without make_model() (a fit_predict of its own) keeps nothing.
    plain = ("from sklearn.linear_model import Ridge\n\n\n"
             "def fit_predict(X, y, X_valid, X_test):\n"
             "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
             "    model = Ridge().fit(X, y)\n"
             "    return model.predict(X_valid), model.predict(X_test)\n")
    result, _ = scored(task, folds, plain)
    assert result.fitted is None


def test_fold_states_are_cut_apart_only_when_whole() -> None:
    states = [MODEL_MAGIC + b"a", MODEL_MAGIC + b"bcd"]
    blob = FOLDS_MAGIC + b"%d %d\n" % (len(states[0]), len(states[1])) + b"".join(states)
    assert fold_states(blob) == states
    assert fold_states(blob[:-1]) is None  # truncated
    assert fold_states(FOLDS_MAGIC + b"x\n") is None
    assert fold_states(MODEL_MAGIC + b"a") is None and fold_states(None) is None


@pytest.fixture(scope="module")
def kept_ensemble(task: PreparedTask) -> tuple[str, list[list[bytes]], list[bytes]]:
    """An ensemble of MEMBERS weighted 3 to 1: its code, each member's kept fold models from
    an all-folds scoring run, and each member's test predictions as its node keeps them."""
    # 2 members x 6 folds: 12 blocks, so block 10 follows 9
    codes, states, tests = kept_members(task, make_folds(task, 6), MEMBERS)
    return ensemble_code(task_context(task, 0), codes, WEIGHTS), states, tests


WEIGHTS = [3, 1]


def served_by(task: PreparedTask, code: str, states: list[bytes]) -> np.ndarray:
    """What the saved fold models of `code` predict for the test rows, with no training rows
    at all, their folds combined."""
    result = run_script(fitted_wrapper(LOAD), replay_inputs(
        [b"\x00 no rows"] * len(states), code, states, csv_bytes(task.test_X)), LIMITS)
    assert result.status == "ok", result.stderr_tail
    blocks = read_stacked(task, result.test_csv, "test", len(task.test_X), len(states))
    return combine_predictions(task, blocks)["prediction"].to_numpy()


def test_an_ensemble_is_put_together_from_its_members_kept_models(
        task: PreparedTask, kept_ensemble: tuple[str, list[list[bytes]], list[bytes]]) -> None:
    code, states, tests = kept_ensemble
    run_all = one_at_a_time(run_script)
    fitted = compose_answer(task, "e1", code, states, tests, run_all, LIMITS)
    assert fitted is not None, "the kept models did not check out"
    assert fitted.record["from"] == "the fold models its scoring kept"
    assert fitted.record["fit_seconds"] == 0.0 and len(fitted.states) == 6
    assert fitted.record["compose_runs"] == 1
    # The composed models predict what the ensemble node scored: its members' test
    # predictions combined by the weights.
    scored_ensemble = combine_predictions(
        task, [read_submission(task, t, "test") for t in tests], WEIGHTS)["prediction"]
    assert np.allclose(served_by(task, code, fitted.states), scored_ensemble.to_numpy(),
                       rtol=1e-9, atol=1e-9)
    # Kept models that do not give their member's scored predictions are not used.
    swapped = [tests[1], tests[0]]
    assert compose_answer(task, "e1", code, states, swapped, run_all, LIMITS) is None


def test_models_too_big_for_one_run_are_put_together_in_several(
        task: PreparedTask, kept_ensemble: tuple[str, list[list[bytes]], list[bytes]]) -> None:
    # README command 1 on concrete: an ensemble of six members, 236.5 MiB over five folds, more
    # than one run may hand back (SUBMISSION_CAP); the cut answer was fitted again, 69 s.
    code, states, tests = kept_ensemble
    fold_bytes = [sum(len(member[fold]) for member in states) for fold in range(6)]
    cap = int(2.5 * max(fold_bytes) / COMPOSE_SHARE_OF_CAP)  # two folds a run, never three
    calls: list[int] = []

    def run_all(jobs: list[tuple[str, dict[str, bytes], Limits]]) -> list[ExecResult]:
        calls.append(len(jobs))
        return [run_script(*job) for job in jobs]

    fitted = compose_answer(task, "e1", code, states, tests, run_all, LIMITS, cap=cap)
    assert fitted is not None and calls == [3] and fitted.record["compose_runs"] == 3
    whole = compose_answer(task, "e1", code, states, tests, one_at_a_time(run_script), LIMITS)
    assert whole is not None
    assert np.allclose(served_by(task, code, fitted.states),
                       served_by(task, code, whole.states), rtol=1e-12, atol=1e-12)
    # A fold whose kept models alone are over what a run may hand back: fitted again.
    assert compose_answer(task, "e1", code, states, tests, run_all, LIMITS,
                          cap=int(0.5 * max(fold_bytes))) is None
    assert calls == [3]  # and no run was spent finding that out


def test_compose_runs_take_consecutive_folds_under_the_share_of_the_cap() -> None:
    cap = 100  # 90 bytes a run
    assert compose_runs([[30, 30, 30]], cap) == [[0, 1, 2]]
    assert compose_runs([[50, 30, 20, 60, 40]], cap) == [[0, 1], [2, 3], [4]]
    # two members: a fold's models take what both members' take
    assert compose_runs([[20, 10, 10, 30, 20], [30, 20, 10, 30, 20]], cap) \
        == [[0, 1], [2, 3], [4]]
    assert compose_runs([[30, 95]], cap) is None
    assert compose_runs([[30, 30], [30]], cap) is None  # not the same folds
    assert compose_runs([[]], cap) == []


def context(task_type: str = "regression", proba: bool = False) -> TaskContext:
    return TaskContext(preview="", target="y", task_type=task_type, metric="m", maximize=True,
                       labels=("a", "b") if proba else (), needs_proba=proba)


EARLIER = ("import lightgbm as lgb\n\nPARAMS = {'n_estimators': 40}\n\n\n"
           "def fit_predict(X, y, X_valid, X_test):\n"
           "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
           "    model = lgb.LGBMRegressor(**PARAMS, random_state=0, verbose=-1)\n"
           "    model.fit(X, y)\n"
           "    return model.predict(X_valid), model.predict(X_test)\n")


def test_a_case_in_the_engines_earlier_form_becomes_make_model_code() -> None:
    now = engine_form(context(), EARLIER)
    assert now is not None
    assert "return Encoded(lgb.LGBMRegressor(**PARAMS, random_state=0, verbose=-1))" in now
    assert "PARAMS = {'n_estimators': 40}" in now and "prepare(" not in now
    assert engine_form(context(), now) == now  # the form it writes is read back as its own
    # Anything else stays as stored: a step between prepare and the fit, a name the code did
    # not import, a lambda, another predict call than the task's, other module-level code.
    for changed in (
        EARLIER.replace("    model.fit", "    X = X * 2\n    model.fit"),
        EARLIER.replace("random_state=0", "random_state=SEED"),
        EARLIER.replace("random_state=0", "random_state=(lambda: 0)()"),
        EARLIER + "\nprint('hello')\n",
        EARLIER.replace("PARAMS = {'n_estimators': 40}", "PARAMS = dict(n_estimators=40)"),
    ):
        assert engine_form(context(), changed) is None, changed
    assert engine_form(context("binary", proba=True), EARLIER) is None


def test_the_answer_candidates_are_the_top_nodes_their_members_and_ensemble_candidates(
        task: PreparedTask) -> None:
    nodes = [make_node(f"{i:012x}", metric=0.01 * i, operator=Operator.PORTFOLIO,
                       code=assemble(task_context(task, 0), model_code(
                           task_context(task, 0), "lgbm", {"n_estimators": i})))
             for i in range(1, 31)]
    journal = Journal(nodes)
    weights = {"000000000001": 1, "000000000002": 1}
    written = ensemble_written(task_context(task, 0), [journal.get(i) for i in weights],
                               weights, len(journal))
    journal.add(replace(ensemble_of(task, journal, weights), code=written.code))
    keep = answer_candidates(journal)
    assert "e" * 12 in keep  # the best node, an ensemble of two weak members
    assert {"000000000001", "000000000002"} <= keep
    assert f"{30:012x}" in keep and f"{5:012x}" not in keep


@pytest.mark.slow  # a whole search: the slow step
def test_a_searched_answer_is_saved_from_its_kept_fold_models(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    make_data(tmp_path / "d.csv", rows=240)
    assert run_main(["--data", str(tmp_path / "d.csv"), "--target", "y", "--llm", "none",
                     "--max-nodes", "6", "--budget", "3m", "--executors", "2",
                     "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    model = json.loads((run / "best" / "model" / "model.json").read_text())
    assert model["saved"] and model["form"] == "fitted model", model
    assert model["from"] == "the fold models its scoring kept" and model["fit_seconds"] == 0.0
    assert not any((run / "models").iterdir())  # the working copies are gone at the end
    task = RunStore.open(run).load_task()
    # The selection served the saved answer and recorded its one-row p50, as one serves it
    # again now; a run without a saved answer serves none.
    selection = json.loads((run / "manifest.json").read_text())["selection"]
    assert selection["latency"]["served_ms"] > 0
    assert "; served, " in (run / "summary.md").read_text()
    again = served_one_row_ms(run, task.test_X.head(1), calls=3, gap=0.0)
    assert again is not None and again > 0
    rows = tmp_path / "rows.csv"
    task.test_X.to_csv(rows, index=False)
    capsys.readouterr()
    assert predict_main([str(run), str(rows), "-o", str(tmp_path / "p.csv")]) == 0
    assert "nothing trained" in capsys.readouterr().out
    served = pd.read_csv(tmp_path / "p.csv")["prediction"]
    answer = pd.read_csv(io.BytesIO((run / "best" / "submission" / "test.csv").read_bytes()))
    assert np.allclose(served, answer["prediction"], rtol=1e-9, atol=1e-9)
    # Exported, the fitted models ship without the rows they learned from, and predict alone.
    bundle = tmp_path / "bundle"
    export_model(run, bundle)
    assert not (bundle / "data").exists()
    assert not any(p.suffix == ".csv" for p in bundle.rglob("*"))
    done = subprocess.run([sys.executable, "predict.py", str(rows), "-o", "out.csv"],
                          cwd=bundle, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    exported = pd.read_csv(bundle / "out.csv")["prediction"]
    assert np.allclose(exported, answer["prediction"], rtol=1e-9, atol=1e-9)
    shutil.rmtree(run / "best" / "model")
    assert served_one_row_ms(run, task.test_X.head(1), calls=3) is None
    shutil.rmtree(run)


def test_the_summary_says_the_saved_model_was_put_together_not_fitted(tmp_path: Path) -> None:
    record = {"saved": True, "models": 5, "training": "the learn rows of each of 5 folds",
              "bytes": 3 * 2**20, "from": "the fold models its scoring kept",
              "compose_seconds": 7.72, "fit_seconds": 0.0, "replay_seconds": 0.0}
    (line,) = model_lines(record, tmp_path)
    assert "the fold models its scoring kept, put together in 7.7 s: nothing fitted again" in line
    fitted = {k: v for k, v in record.items() if k not in ("from", "compose_seconds")}
    (line,) = model_lines({**fitted, "fit_seconds": 26.1}, tmp_path)
    assert "fitting took 26.1 s" in line
