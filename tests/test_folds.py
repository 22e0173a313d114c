"""Folds of train+valid: the rule for how many, every dev row held out once, no held-out label in
a fold's inputs, the holdout as one fold; and the all-folds harness run for real in the sandbox,
its out-of-fold predictions scored like fold-by-fold runs."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.evaluation.folds import (
    FOLDS_FILE,
    HOLDOUT,
    MIN_SEARCH_ROWS,
    OUTSIDE,
    SEARCH_CELLS_PER_EXECUTOR_SECOND,
    all_folds_inputs,
    dev_frame,
    dev_labels,
    fold_count,
    fold_inputs,
    fold_splitter,
    make_folds,
    search_rows,
    search_task,
    search_test_rows,
)
from engine.evaluation.scoring import read_stacked, read_submission, score_held_out
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.context import TaskContext
from operators.harness import assemble, baseline_code
from sandbox import Limits, run_script


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    rng = np.random.default_rng(0)
    rows = 200
    frame = pd.DataFrame({"a": rng.normal(size=rows), "b": rng.normal(size=rows),
                          "c": rng.choice(["x", "y", "z"], rows)})
    frame["label"] = np.where(frame.a + 0.3 * rng.normal(size=rows) > 0, "yes", "no")
    path = tmp_path_factory.mktemp("folds") / "data.csv"
    frame.to_csv(path, index=False)
    return prepare_task(TaskSpec(path, "label", None, "roc_auc", ""))


def test_classes_are_stratified_and_numbers_only_shuffled() -> None:
    labels = np.array(["a"] * 40 + ["b"] * 10)
    for _, rows in fold_splitter("binary", 5, seed=0).split(labels, labels):
        assert sorted(labels[rows].tolist()) == ["a"] * 8 + ["b"] * 2
    regression = [rows.tolist() for _, rows in fold_splitter("regression", 5, 0).split(labels)]
    assert sorted(row for rows in regression for row in rows) == list(range(50))
    assert regression[0] != list(range(10)), "shuffled, not cut in order"


def test_the_rule_for_how_many_folds() -> None:
    assert [fold_count(n) for n in (100, 20_000, 20_001, 100_001)] == [5, 5, 1, 1]
    assert fold_count(50, 2) == 2 and fold_count(10**6, 5) == 5


def test_every_dev_row_is_held_out_once_stratified(task: PreparedTask) -> None:
    folds = make_folds(task, 5, seed=3)
    n_dev = len(task.train) + len(task.valid_X)
    assert folds.k == 5 and len(folds.fold_of) == n_dev
    assert sorted(np.concatenate([folds.rows(i) for i in range(5)]).tolist()) == list(
        range(n_dev))
    assert np.array_equal(folds.held_out, np.arange(n_dev))
    labels = dev_labels(task).astype(str).to_numpy()
    overall = np.mean(labels == "yes")
    for i in range(5):
        assert abs(np.mean(labels[folds.rows(i)] == "yes") - overall) < 0.06
    again = make_folds(task, 5, seed=3)
    assert np.array_equal(again.fold_of, folds.fold_of)
    assert not np.array_equal(make_folds(task, 5, seed=4).fold_of, folds.fold_of)


def test_a_folds_inputs_hold_no_label_of_its_rows(task: PreparedTask) -> None:
    folds = make_folds(task, 5, seed=0)
    dev = dev_frame(task)
    files = fold_inputs(task, folds, 2)
    learn = pd.read_csv(io.BytesIO(files["train.csv"]))
    held = pd.read_csv(io.BytesIO(files["valid.csv"]))
    assert "label" not in held.columns and len(held) == len(folds.rows(2))
    assert len(learn) == len(dev) - len(held) and "label" in learn.columns
    assert np.allclose(held["a"], dev["a"].iloc[folds.rows(2)])
    assert np.allclose(learn["a"], dev["a"].iloc[folds.learn_rows(2)])
    assert files["test.csv"] == task.split_files["test.csv"]
    assert FOLDS_FILE not in files  # only engine-written code gets every fold at once


def test_the_holdout_is_one_fold_train_to_valid(task: PreparedTask) -> None:
    folds = make_folds(task, HOLDOUT)
    assert folds.k == 1 and len(folds.held_out) == len(task.valid_X)
    assert (folds.fold_of[: len(task.train)] == -1).all()
    assert fold_inputs(task, folds, 0) == task.inputs()
    assert folds.to_json() == type(folds).from_json(folds.to_json()).to_json()


def test_a_large_holdout_search_uses_a_sample_sized_by_the_budget() -> None:
    cells = SEARCH_CELLS_PER_EXECUTOR_SECOND * 300 * 2
    assert search_rows(800_000, 18, 300, 2) == cells // 18 < 800_000
    assert search_rows(800_000, 18, 7200, 2) == 800_000, "a long budget searches every row"
    assert search_rows(800_000, 10_000, 60, 1) == MIN_SEARCH_ROWS
    assert search_rows(5_000, 18, 60, 1) == 5_000


def test_a_search_on_a_sample_predicts_as_many_test_rows_and_sees_them_alone(
        task: PreparedTask) -> None:
    folds = make_folds(task, HOLDOUT, seed=1, rows=60)
    rows = search_test_rows(folds, len(task.test_X))
    assert len(rows) == len(folds.held_out) < len(task.test_X)
    assert (np.diff(rows) > 0).all() and rows.tolist() != list(range(len(rows)))
    assert search_test_rows(folds, len(task.test_X)).tolist() == rows.tolist()  # a resume's
    assert search_test_rows(make_folds(task, HOLDOUT, seed=2, rows=60),
                            len(task.test_X)).tolist() != rows.tolist()
    task.preview()  # computed once, of train: the search's task has it without a second time
    searched = search_task(task, folds)
    assert searched.__dict__["_preview"] is task.__dict__["_preview"]
    pd.testing.assert_frame_equal(searched.test_X, task.test_X.iloc[rows].reset_index(drop=True))
    assert searched.test_y.tolist() == task.test_y.iloc[rows].tolist()
    pd.testing.assert_frame_equal(pd.read_csv(io.BytesIO(fold_inputs(searched, folds, 0)[
        "test.csv"])), searched.test_X, check_dtype=False)
    assert searched.train is task.train and searched.valid_X is task.valid_X
    # Every row, the task itself: a search of every dev row, k-fold or the holdout.
    for every in (make_folds(task, 5), make_folds(task, HOLDOUT)):
        assert search_test_rows(every, len(task.test_X)).tolist() == list(
            range(len(task.test_X)))
        assert search_task(task, every) is task


def test_the_sampled_holdout_learns_and_scores_on_its_sample_alone(task: PreparedTask,
                                                                   tmp_path: Path) -> None:
    n_train, n_dev = len(task.train), len(task.train) + len(task.valid_X)
    folds = make_folds(task, HOLDOUT, seed=1, rows=60)
    learn, held = folds.learn_rows(0), folds.held_out
    assert folds.sampled and not make_folds(task, HOLDOUT, rows=n_dev).sampled
    assert len(learn) + len(held) == 60 == len(folds.searched)
    assert len(learn) == round(60 * n_train / n_dev) and (learn < n_train).all()
    assert (held >= n_train).all()
    assert learn.tolist() != list(range(len(learn))), "a random sample, not the first rows"
    assert (folds.fold_of == OUTSIDE).sum() == n_dev - 60
    dev = dev_frame(task)
    one = fold_inputs(task, folds, 0)
    pd.testing.assert_frame_equal(pd.read_csv(io.BytesIO(one["train.csv"])),
                                  dev.iloc[learn].reset_index(drop=True), check_dtype=False)
    assert len(pd.read_csv(io.BytesIO(one["valid.csv"]))) == len(held)
    assert task.target not in pd.read_csv(io.BytesIO(one["valid.csv"])).columns
    assert one["test.csv"] == task.split_files["test.csv"]
    assert type(folds).from_json(folds.to_json()).sampled
    # engine-written code runs on the sample's rows alone, for real: its held-out predictions
    # are the sample's valid rows
    every = all_folds_inputs(task, folds)
    assert len(pd.read_csv(io.BytesIO(every["train.csv"]))) == 60
    assert pd.read_csv(io.BytesIO(every[FOLDS_FILE]))["fold"].tolist() == (
        folds.fold_of[folds.searched].tolist())
    ctx = TaskContext(preview="", target="label", task_type="binary", metric="roc_auc",
                      maximize=True, labels=task.labels, needs_proba=True)
    result = run_script(assemble(ctx, baseline_code(ctx), all_folds=True), every,
                        Limits(wall_seconds=120))
    assert result.status == "ok", result.stderr_tail
    assert len(read_submission(task, result.valid_csv, "valid", len(held))) == len(held)


def test_all_folds_run_scores_like_fold_by_fold_runs(task: PreparedTask, tmp_path: Path) -> None:
    """The engine's all-folds harness, run for real, gives the same out-of-fold predictions
    and score as separate runs of the same model code, one per fold. Three folds, not the
    default five: each separate run is a sandbox process, and three already tell the folds'
    parts apart in the stacked predictions."""
    folds = make_folds(task, 3, seed=0)
    ctx = TaskContext(preview="", target="label", task_type="binary", metric="roc_auc",
                      maximize=True, labels=task.labels, needs_proba=True)
    model = baseline_code(ctx)
    limits = Limits(wall_seconds=120)
    together = run_script(assemble(ctx, model, all_folds=True), all_folds_inputs(task, folds),
                          limits)
    assert together.status == "ok", together.stderr_tail
    held = folds.held_out
    truth = dev_labels(task).iloc[held]
    tests = read_stacked(task, together.test_csv, "test", len(task.test_X), folds.k)
    one = score_held_out(task, truth, [read_submission(task, together.valid_csv, "valid",
                                                       len(held))], [held], tests)
    valid, test_parts, rows = [], [], []
    for fold in range(folds.k):
        result = run_script(assemble(ctx, model), fold_inputs(task, folds, fold), limits)
        assert result.status == "ok", result.stderr_tail
        valid.append(read_submission(task, result.valid_csv, "valid", len(folds.rows(fold))))
        test_parts.append(read_submission(task, result.test_csv, "test"))
        rows.append(folds.rows(fold))
    apart = score_held_out(task, truth, valid, rows, test_parts)
    assert one.valid_raw == pytest.approx(apart.valid_raw)
    assert one.test_raw == pytest.approx(apart.test_raw)
    assert 0.5 < one.valid_raw <= 1.0
