"""`python -m engine.export model`: the answer as a folder that predicts without treeml, run for
real (a scripted search, then the folder's own predict.py in a plain subprocess; the slow test
in a fresh venv holding only the folder's requirements.txt)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.export import main as export_main
from engine.predict import main as predict_main
from engine.records.store import RunStore
from tests.test_outputs import scripted_run

ROWS = 9


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_run(tmp_path_factory)


@pytest.fixture(scope="module")
def exported(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "model"
    assert export_main(["model", str(run_dir), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def rows_and_engine_predictions(run_dir: Path,
                                tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("rows")
    task = RunStore.open(run_dir).load_task()
    rows = tmp / "rows.csv"
    task.test_X.tail(ROWS).to_csv(rows, index=False)
    assert predict_main([str(run_dir), str(rows), "-o", str(tmp / "engine.csv")]) == 0
    return rows, tmp / "engine.csv"


def predict_with(python: str, folder: Path, rows: Path, out: Path) -> None:
    # Outside this project: no treeml on the path, the folder as the working directory.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([python, "predict.py", str(rows), "-o", str(out)], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert f"wrote {ROWS} predictions" in done.stdout


def test_the_folder_holds_what_it_needs(exported: Path, run_dir: Path) -> None:
    folds = RunStore.open(run_dir).load_folds()
    assert folds is not None
    names = {p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file()}
    assert {"solution.py", "replay.py", "predict.py", "model.json", "requirements.txt",
            "README.md"} <= names
    assert {f"model/fold-{i}.pkl" for i in range(folds.k)} <= names
    assert {f"data/train-{i}.csv" for i in range(folds.k)} <= names
    pins = (exported / "requirements.txt").read_text().split()
    assert {p.split("==")[0] for p in pins} >= {"numpy", "pandas", "scikit-learn"}
    assert all("==" in p for p in pins)
    assert "Loading this model runs code" in (exported / "README.md").read_text()
    assert "import engine" not in (exported / "predict.py").read_text()


def test_predicts_as_the_engine_does(exported: Path,
                                     rows_and_engine_predictions: tuple[Path, Path],
                                     tmp_path: Path) -> None:
    rows, engine = rows_and_engine_predictions
    predict_with(sys.executable, exported, rows, tmp_path / "out.csv")
    ours, theirs = pd.read_csv(tmp_path / "out.csv"), pd.read_csv(engine)
    assert list(ours.columns) == list(theirs.columns) and len(ours) == ROWS
    assert np.allclose(ours.prediction, theirs.prediction, rtol=1e-9, atol=1e-12)


def test_refuses_a_folder_in_use_and_a_run_without_a_model(run_dir: Path, exported: Path,
                                                           tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    assert export_main(["model", str(run_dir), "-o", str(exported)]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare, ignore=shutil.ignore_patterns("model"))
    assert export_main(["model", str(bare), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no saved model" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_predicts_in_a_fresh_venv_from_its_requirements(exported: Path,
                                                        rows_and_engine_predictions: tuple[
                                                            Path, Path],
                                                        tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # The README's install, without compiling what it installs (22 of its 29 s here): bytecode
    # changes no prediction, and this venv is imported once.
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "-r",
                          str(exported / "requirements.txt")],
                         capture_output=True, text=True, timeout=1200, check=False)
    assert pip.returncode == 0, pip.stderr[-2000:]
    rows, engine = rows_and_engine_predictions
    predict_with(str(venv / "bin" / "python"), exported, rows, tmp_path / "out.csv")
    assert np.allclose(pd.read_csv(tmp_path / "out.csv").prediction,
                       pd.read_csv(engine).prediction, rtol=1e-9, atol=1e-12)
