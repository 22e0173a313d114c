"""`python -m engine.predict`: the answer on new rows, in the sandbox: its saved model, or
trained again."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.predict import main, training_sets
from engine.records.store import RunStore
from engine.task.prepare import PreparedTask
from tests.test_outputs import scripted_run

ROWS = 7


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_run(tmp_path_factory)


@pytest.fixture(scope="module")
def task(run_dir: Path) -> PreparedTask:
    return RunStore.open(run_dir).load_task()


@pytest.fixture
def new_rows(task: PreparedTask, tmp_path: Path) -> Path:
    path = tmp_path / "new_rows.csv"
    # Shuffled column order: the columns must match as a set, in any order.
    task.test_X.head(ROWS)[["c", "a", "b"]].to_csv(path, index=False)
    return path


def test_predicts_one_row_per_input(run_dir: Path, new_rows: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "predictions.csv"
    assert main([str(run_dir), str(new_rows), "-o", str(out)]) == 0
    assert f"wrote {ROWS} predictions to {out}" in capsys.readouterr().out
    predictions = pd.read_csv(out)
    assert list(predictions.columns) == ["prediction"] and len(predictions) == ROWS
    # Same training data, same deterministic model: the best node's own test predictions.
    searched = pd.read_csv(run_dir / "best" / "submission" / "test.csv").prediction.head(ROWS)
    assert np.allclose(predictions.prediction, searched, rtol=1e-9, atol=1e-9)


def test_the_saved_model_predicts_as_training_again_would(
        run_dir: Path, new_rows: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    model = json.loads((run_dir / "best" / "model" / "model.json").read_text())
    folds = RunStore.open(run_dir).load_folds()
    assert folds is not None and model["saved"] is True and model["models"] == folds.k
    saved_out = tmp_path / "saved.csv"
    assert main([str(run_dir), str(new_rows), "-o", str(saved_out)]) == 0
    assert f"its saved model ({folds.k} fitted, nothing trained)" in capsys.readouterr().out
    unsaved = tmp_path / "unsaved"
    shutil.copytree(run_dir, unsaved, ignore=shutil.ignore_patterns("model"))
    trained_out = tmp_path / "trained.csv"
    assert main([str(unsaved), str(new_rows), "-o", str(trained_out)]) == 0
    assert f"trained again ({folds.k} fits: no saved model)" in capsys.readouterr().out
    # A deterministic model: the saved fits and a new training give the same predictions.
    assert np.allclose(pd.read_csv(saved_out).prediction, pd.read_csv(trained_out).prediction,
                       rtol=1e-9, atol=1e-12)


def test_text_in_a_numeric_column_is_named(run_dir: Path, task: PreparedTask, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    bad = task.test_X.head(3).astype({"b": object})
    bad.loc[bad.index[1], "b"] = "twelve"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    out = tmp_path / "p.csv"
    assert main([str(run_dir), str(tmp_path / "bad.csv"), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'b' held numbers in training" in err
    assert not out.exists()


def test_target_column_in_new_rows_is_dropped(run_dir: Path, task: PreparedTask,
                                              tmp_path: Path) -> None:
    rows = task.test_X.head(3).copy()
    rows[task.target] = 0.0
    rows.to_csv(tmp_path / "with_target.csv", index=False)
    out = tmp_path / "p.csv"
    assert main([str(run_dir), str(tmp_path / "with_target.csv"), "-o", str(out)]) == 0
    assert len(pd.read_csv(out)) == 3


def test_missing_and_extra_columns_are_named(run_dir: Path, task: PreparedTask,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    bad = task.test_X.head(3).drop(columns=["b"]).assign(zz=1)
    bad.to_csv(tmp_path / "bad.csv", index=False)
    out = tmp_path / "p.csv"
    assert main([str(run_dir), str(tmp_path / "bad.csv"), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "missing columns 'b'" in err and "extra columns 'zz'" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "bad.csv"]


def test_refit_trains_on_train_and_valid(run_dir: Path, task: PreparedTask, new_rows: Path,
                                         tmp_path: Path) -> None:
    folds = RunStore.open(run_dir).load_folds()
    (only,) = training_sets(task, folds, refit=True)
    both = pd.read_csv(io.BytesIO(only))
    assert len(both) == len(task.train) + len(task.valid_X)
    per_fold = training_sets(task, folds, refit=False)  # the answer: one model per fold
    assert folds is not None and len(per_fold) == folds.k
    assert [len(pd.read_csv(io.BytesIO(b))) for b in per_fold] == [
        len(folds.learn_rows(i)) for i in range(folds.k)]
    assert list(both.columns) == list(task.train.columns)
    assert np.allclose(both[task.target].tail(len(task.valid_y)), task.valid_y)
    plain, refit = tmp_path / "plain.csv", tmp_path / "refit.csv"
    assert main([str(run_dir), str(new_rows), "-o", str(plain)]) == 0
    assert main([str(run_dir), str(new_rows), "-o", str(refit), "--refit"]) == 0
    a, b = pd.read_csv(plain).prediction, pd.read_csv(refit).prediction
    assert len(b) == ROWS and np.isfinite(b).all()
    assert not np.allclose(a, b, rtol=0, atol=1e-12)  # more data, another fit


def test_not_a_run_dir_and_no_best(run_dir: Path, new_rows: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.csv"
    assert main([str(tmp_path), str(new_rows), "-o", str(out)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare, ignore=shutil.ignore_patterns("best"))
    assert main([str(bare), str(new_rows), "-o", str(out)]) == 1
    assert "no best solution" in capsys.readouterr().err
    assert not out.exists()


def test_a_failing_solution_is_one_line_and_exit_1(run_dir: Path, new_rows: Path,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken, ignore=shutil.ignore_patterns("nodes", "good", "plots"))
    (broken / "best" / "solution.py").write_text("raise RuntimeError('model file gone')\n")
    out = tmp_path / "p.csv"
    assert main([str(broken), str(new_rows), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model file gone" in err
    assert not out.exists()
