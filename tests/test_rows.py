"""An ensemble answer of a search on a sample, held to part of the rows by the time left, is
weighed against its members refitted on more: a learning curve measured on half the sample
prices the rows (engine/evaluation/rows.py)."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.config import RunConfig
from engine.evaluation.closing import closing_seconds, save_share
from engine.evaluation.folds import HOLDOUT, OUTSIDE, dev_labels, make_folds, search_task
from engine.evaluation.rows import estimate, half_sample, refit_rows, weigh_rows
from engine.search_run import task_context
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.harness import assemble
from operators.kinds.ensemble import ensemble_written
from operators.models import model_code
from sandbox import ExecResult, Limits, run_script
from search.journal import Journal
from search.node import Node, Operator, Status

M1, M2 = "a1" * 6, "b2" * 6  # node ids as the engine writes them (12 hex digits)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    rng = np.random.default_rng(0)
    n = 600
    a, b = rng.normal(size=(2, n))
    frame = pd.DataFrame({"a": a, "b": b, "y": a * b + 0.1 * rng.normal(size=n)})
    path = tmp_path_factory.mktemp("rows") / "d.csv"
    frame.to_csv(path, index=False)
    return prepare_task(TaskSpec(path, "y"))


def config(**changes: object) -> RunConfig:
    return dataclasses.replace(RunConfig(), budget=600.0, **changes)  # type: ignore[arg-type]


def member(task: PreparedTask, node_id: str, metric: float, trees: int) -> Node:
    """An engine-written LightGBM node scored on the sample: 8 s a scoring run, 2 s fitting."""
    ctx = task_context(task, 0)
    code = assemble(ctx, model_code(ctx, "lgbm", {"n_estimators": trees, "num_leaves": 7}))
    return Node(node_id=node_id, parent_id=None, operator=Operator.TUNE, status=Status.OK,
                code=code, code_hash=node_id, metric=metric, exec_seconds=8.0, train_seconds=2.0)


def answer_of(task: PreparedTask, members: list[Node], metric: float) -> tuple[Journal, Node]:
    written = ensemble_written(task_context(task, 0), members,
                               {m.node_id: 1 for m in members}, candidates=len(members))
    node = Node(node_id="e" * 12, parent_id=None, operator=Operator.ENSEMBLE, status=Status.OK,
                code=written.code, plan=written.plan, code_hash="e", metric=metric)
    return Journal([*members, node]), node


def scored(task: PreparedTask, offset: float) -> Callable[..., ExecResult]:
    """A runner whose run predicts the sample's held-out rows' truth plus `offset`."""
    truth = dev_labels(task).iloc[make_folds(task, HOLDOUT, rows=200).held_out].to_numpy()

    def run(code: str, inputs: dict[str, bytes], limits: Any) -> ExecResult:
        assert len(pd.read_csv(io.BytesIO(inputs["valid.csv"]))) == len(truth)
        valid = pd.DataFrame({"prediction": truth + offset})
        return ExecResult("ok", 0, "", "", 3.0, valid.to_csv(index=False).encode(), b"", "",
                          "bwrap")
    return run


def test_half_the_sample_learns_from_half_its_rows_and_predicts_the_same_rows(
        task: PreparedTask) -> None:
    folds = make_folds(task, HOLDOUT, rows=200)
    half = half_sample(folds)
    assert len(half.learn_rows(0)) == len(folds.learn_rows(0)) - len(folds.learn_rows(0)) // 2
    assert set(half.learn_rows(0)) < set(folds.learn_rows(0))
    assert (half.held_out == folds.held_out).all()
    assert (half.fold_of[folds.fold_of == OUTSIDE] == OUTSIDE).all()
    assert (half_sample(folds).fold_of == half.fold_of).all()  # seeded


def test_each_doubling_of_the_rows_is_worth_half_the_one_before() -> None:
    assert estimate(0.8, 200, 100, 0.01) == pytest.approx(0.805)
    assert estimate(0.8, 400, 100, 0.01) == pytest.approx(0.8075)
    assert estimate(0.8, 10**9, 100, 0.01) == pytest.approx(0.81)  # at most the slope
    assert estimate(0.8, 100, 100, 0.01) == pytest.approx(0.8)
    assert estimate(0.8, 50, 100, 0.01) == pytest.approx(0.8)  # never fewer than learned
    assert estimate(0.8, 10_000, 100, 0.0) == pytest.approx(0.8)


def weighed_at(task: PreparedTask, offset: float):  # type: ignore[no-untyped-def]
    folds = make_folds(task, HOLDOUT, rows=200)
    learned, dev = len(folds.learn_rows(0)), len(folds.fold_of)
    members = [member(task, M1, -0.30, 50), member(task, M2, -0.31, 60)]
    journal, answer = answer_of(task, members, -0.29)
    # the time left affords the ensemble (16 s of scoring runs, 4 s fitting) twice its
    # sample's rows, and one member every row
    left = save_share(answer, True) * (16.0 + 4.0)
    own = refit_rows(task, journal, answer, folds, left)
    assert own == 2 * learned < dev
    assert refit_rows(task, journal, members[0], folds, left) is None
    truth = dev_labels(task).iloc[folds.held_out]
    return weigh_rows(task, search_task(task, folds), journal, folds, answer, left,
                      scored(task, offset), Limits(), truth), answer, own, learned, dev


def test_rows_worth_more_than_the_ensemble_hand_the_answer_to_its_best_member(
        task: PreparedTask) -> None:
    # half the sample predicts 0.4 off every row: RMSE 0.4 against the best member's 0.30 on
    # the whole sample: that doubling gained 0.1
    weighed, answer, own, learned, _ = weighed_at(task, 0.4)
    assert weighed is not None and weighed.top == M1
    assert weighed.half == pytest.approx(-0.4) and weighed.slope == pytest.approx(0.1)
    assert weighed.chosen == M1 and weighed.seconds == 3.0
    got = {node: (rows, value) for node, rows, value in weighed.candidates}
    rows = got[M1][0]
    assert rows > own and got[answer.node_id][0] == own
    assert got[M1][1] == pytest.approx(-0.30 + 0.1 * (1 - learned / rows))
    assert got[answer.node_id][1] == pytest.approx(-0.29 + 0.05)  # twice the rows
    assert f"gives way to its member {M1}" in weighed.text(answer.node_id)


def test_rows_worth_nothing_keep_the_ensemble(task: PreparedTask) -> None:
    # half the sample predicts 0.2 off: better than the best member on the whole sample (noise
    # of the fit), so the slope is 0 and the ensemble's better valid score decides
    weighed, answer, *_ = weighed_at(task, 0.2)
    assert weighed is not None and weighed.slope == 0.0 and weighed.chosen == answer.node_id


def test_the_curve_runs_for_real_and_is_reserved_for(task: PreparedTask, tmp_path: Any) -> None:
    folds = make_folds(task, HOLDOUT, rows=200)
    truth = dev_labels(task).iloc[folds.held_out]
    members = [member(task, M1, -0.30, 50), member(task, M2, -0.31, 60)]
    journal, answer = answer_of(task, members, -0.29)
    left = save_share(answer, True) * (16.0 + 4.0)

    def run(code: str, inputs: dict[str, bytes], limits: Any) -> ExecResult:
        return run_script(code, inputs, Limits(wall_seconds=120), workdir_root=tmp_path)

    weighed = weigh_rows(task, search_task(task, folds), journal, folds, answer, left, run,
                         Limits(), truth)
    assert weighed is not None and weighed.top == M1 and weighed.seconds > 0
    assert -2.0 < weighed.half < 0 and weighed.slope >= 0  # an RMSE, normalised
    # the reserve holds the curve's run: at most one scoring run of the best member
    plain = dataclasses.replace(answer, operator=Operator.TUNE)
    reserved = closing_seconds(journal, config(save_model=False), folds, task, 1)
    assert reserved > closing_seconds(Journal([*members, plain]), config(save_model=False),
                                      folds, task, 1) - 1e-9


def test_no_weighing_when_every_row_fits_or_the_answer_is_one_node(task: PreparedTask) -> None:
    folds = make_folds(task, HOLDOUT, rows=200)
    truth = dev_labels(task).iloc[folds.held_out]
    members = [member(task, M1, -0.30, 50), member(task, M2, -0.31, 60)]
    journal, answer = answer_of(task, members, -0.29)
    searched = search_task(task, folds)
    run = scored(task, 0.2)
    assert weigh_rows(task, searched, journal, folds, answer, 1e6, run, Limits(), truth) is None
    assert weigh_rows(task, searched, journal, folds, members[0], 10.0, run, Limits(),
                      truth) is None
    every = make_folds(task, HOLDOUT)  # not a sample: the refit is on every row
    assert weigh_rows(task, task, journal, every, answer, 10.0, run, Limits(),
                      dev_labels(task).iloc[every.held_out]) is None
