"""The Python API end to end: fit on a DataFrame, the leaderboard, predictions and
probabilities through the sandbox, load of a finished run. Real engine, scripted LLM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common.errors import UserError
from engine.api import fit, load
from tests.helpers import SCRIPT


def test_fit_a_dataframe_then_predict_and_load(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 240))
    frame = pd.DataFrame({"a": a, "b": b, "label": np.where(a + 0.3 * b > 0, "yes", "no")})
    predictor = fit(frame, "label", budget="2m", metric="roc_auc", llm=f"scripted:{SCRIPT}",
                    max_nodes=2, floor=False, ensemble=False, out=tmp_path / "runs",
                    folds=1)  # the API's fit, predict and load, not the scoring: the holdout
    board = predictor.leaderboard()
    assert len(board) == 2 and board.answer.sum() == 1
    assert board.valid.iloc[0] == board.valid.max() and board.test.notna().any()
    new = frame.drop(columns=["label"]).head(7)
    labels = predictor.predict(new)
    assert len(labels) == 7 and set(labels) <= {"yes", "no"}
    proba = predictor.predict_proba(new)
    assert list(proba.columns) == ["no", "yes"] and np.allclose(proba.sum(axis=1), 1.0)
    assert (proba["yes"] > 0.5).tolist() == (labels == "yes").tolist()
    # The saved model is served by one sandboxed process, from the first call to close().
    assert (predictor.run_dir / "best" / "model" / "model.json").is_file()
    assert predictor._answer is not None
    session = predictor._answer._session
    assert session is not None and session.alive
    assert predictor.predict(new.iloc[::-1]).tolist() == labels.tolist()[::-1]
    assert predictor._answer._session is session
    predictor.close()
    assert not session.alive and not session.workdir.exists()
    again = load(predictor.run_dir)
    assert again.leaderboard().node_id.tolist() == board.node_id.tolist()
    assert "def fit_predict" in again.solution_code() and again.summary().startswith("# Run")


def test_bad_options_and_folders_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown option"):
        fit(pd.DataFrame({"a": [1], "y": [2]}), "y", budgett="1m")
    with pytest.raises(UserError, match="not a run directory"):
        load(tmp_path)
