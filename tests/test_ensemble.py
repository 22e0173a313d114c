"""Engine-written ensembles: the weighted ensemble script run for real, and ensemble selection
in a whole run."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.run import main
from operators.context import TaskContext
from operators.harness import assemble
from operators.kinds.ensemble import ensemble_code
from operators.models import model_code
from sandbox import Limits, run_script
from search.node import MODEL_START


def model(body: str) -> str:
    """Model code whose fit_predict returns `body` for both valid and test rows."""
    return f"def fit_predict(X, y, X_valid, X_test):\n    return {body}\n"


INPUTS = {
    "train.csv": b"x,y\n1,a\n2,b\n3,a\n",
    "valid.csv": b"x\n1\n2\n3\n",
    "test.csv": b"x\n4\n5\n",
}


def run_ensemble(ctx: TaskContext, bodies: list[str],
                 weights: list[int] | None = None) -> pd.DataFrame:
    code = ensemble_code(ctx, [assemble(ctx, model(b)) for b in bodies], weights)
    assert MODEL_START in code
    result = run_script(code, INPUTS, Limits(wall_seconds=60))
    assert result.status == "ok", result.stderr_tail
    return pd.read_csv(io.BytesIO(result.valid_csv))


def test_mean_of_numbers_runs_in_the_sandbox() -> None:
    ctx = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                      maximize=False)
    out = run_ensemble(ctx, ["[1.0, 2.0, 3.0], [0, 0]", "np.array([3.0, 4.0, 5.0]), [0, 0]"])
    assert out.prediction.tolist() == [2.0, 3.0, 4.0]
    weighted = run_ensemble(ctx, ["[1.0, 2.0, 3.0], [0, 0]", "np.array([3.0, 4.0, 5.0]), [0, 0]"],
                            [3, 1])
    assert weighted.prediction.tolist() == [1.5, 2.5, 3.5]


def test_a_member_using_the_harness_names_at_module_level_runs() -> None:
    # An LLM-written node that calls its own fit_predict at module level ran as a node (the
    # harness defines X, y, X_valid, X_test there); inside an ensemble it failed with a
    # NameError, so the answer could be neither saved nor trained again.
    ctx = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                      maximize=False)
    calls = ("def fit_predict(X, y, X_valid, X_test):\n"
             "    return [float(len(train))] * len(X_valid), [0.0] * len(X_test)\n\n"
             "valid_pred, test_pred = fit_predict(X, y, X_valid, X_test)\n")
    code = ensemble_code(ctx, [assemble(ctx, calls), assemble(ctx, model("[1.0] * 3, [0, 0]"))],
                         [1, 1])
    result = run_script(code, {**INPUTS, "train.csv": b"x,y\n1,1\n2,2\n3,3\n"},
                        Limits(wall_seconds=60))
    assert result.status == "ok", result.stderr_tail
    out = pd.read_csv(io.BytesIO(result.valid_csv))
    assert out.prediction.tolist() == [2.0, 2.0, 2.0]  # (3 training rows + 1) / 2


def test_mean_of_probabilities_accepts_binary_vectors() -> None:
    ctx = TaskContext(preview="", target="y", task_type="binary", metric="roc_auc",
                      maximize=True, labels=("a", "b"), needs_proba=True)
    out = run_ensemble(ctx, ["[0.2, 0.4, 1.0], [0.5, 0.5]",
                             "[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], [[0.5, 0.5]] * 2"])
    assert out.proba_b.round(6).tolist() == [0.6, 0.2, 1.0]
    assert out.prediction.tolist() == ["b", "a", "b"]


def test_vote_of_labels_breaks_ties_toward_the_best_member() -> None:
    ctx = TaskContext(preview="", target="y", task_type="multiclass", metric="f1_weighted",
                      maximize=True, labels=("a", "b", "c"))
    out = run_ensemble(ctx, ["['a', 'a', 'c'], ['a', 'a']",
                             "['b', 'a', 'b'], ['a', 'a']",
                             "['b', 'c', 'a'], ['a', 'a']"])
    # row 1: b wins 2-1; row 2: a wins 2-1; row 3: a three-way tie goes to the first member.
    assert out.prediction.tolist() == ["b", "a", "c"]
    heavy = run_ensemble(ctx, ["['a', 'a', 'c'], ['a', 'a']", "['b', 'b', 'b'], ['a', 'a']",
                               "['b', 'c', 'a'], ['a', 'a']"], [3, 1, 1])
    assert heavy.prediction.tolist() == ["a", "a", "c"]  # the first member outweighs the rest


def test_a_member_returning_probabilities_votes_for_its_most_probable_class() -> None:
    # A remembered case written for a probability metric runs unchanged on a label metric.
    ctx = TaskContext(preview="", target="y", task_type="multiclass", metric="f1_weighted",
                      maximize=True, labels=("a", "b", "c"))
    proba = "[[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]], [[1.0, 0.0, 0.0]] * 2"
    out = run_ensemble(ctx, [proba, "['a', 'a', 'a'], ['a', 'a']", proba], [1, 1, 1])
    assert out.prediction.tolist() == ["b", "a", "c"]


def test_members_on_different_feature_sets_each_apply_their_own_programs() -> None:
    # A kept program's node (its code checks the program first) and a trial on another set:
    # each member's FEATURE_PROGRAMS and with_features live in its own namespace.
    ctx = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                      maximize=False)
    square = "def add_features(df):\n    df['x_squared'] = df['x'] ** 2\n    return df\n"
    absolute = "def add_features(df):\n    df['x_abs'] = df['x'].abs()\n    return df\n"
    params = {"alpha": 1e-9}
    members = [assemble(ctx, model_code(ctx, "linear", params, [square], check=True)),
               assemble(ctx, model_code(ctx, "linear", params, [absolute]))]
    x, x_valid = np.linspace(-3, 3, 13), np.array([-2.5, -0.5, 1.5, 2.5])
    inputs = {"train.csv": pd.DataFrame({"x": x, "y": x**2}).to_csv(index=False).encode(),
              "valid.csv": pd.DataFrame({"x": x_valid}).to_csv(index=False).encode(),
              "test.csv": b"x\n0.0\n"}
    result = run_script(ensemble_code(ctx, members, [1, 1]), inputs, Limits(wall_seconds=60))
    assert result.status == "ok", result.stderr_tail
    predicted = pd.read_csv(io.BytesIO(result.valid_csv)).prediction.to_numpy()
    # the first member is exact; the second is least squares on (1, x, |x|)
    design = np.column_stack([np.ones_like(x), x, np.abs(x)])
    coef = np.linalg.lstsq(design, x**2, rcond=None)[0]
    second = np.column_stack([np.ones_like(x_valid), x_valid, np.abs(x_valid)]) @ coef
    assert np.allclose(predicted, (x_valid**2 + second) / 2, atol=1e-4)
    assert not np.allclose(predicted, x_valid**2, atol=0.05)  # the second is not exact


def fit_predict_reply(estimator: str) -> str:
    return (f"A {estimator}.\n```python\nfrom sklearn.ensemble import {estimator}\n\n"
            "def fit_predict(X, y, X_valid, X_test):\n"
            "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
            f"    model = {estimator}(n_estimators=20, random_state=0).fit(X, y)\n"
            "    return model.predict(X_valid), model.predict(X_test)\n```\n")


@pytest.mark.slow  # whole searches, over 20 s: the slow step
@pytest.mark.timing  # portfolio nodes must run within the node budget's wall time
def test_ensembles_run_in_the_loop_and_the_run_uses_its_whole_node_budget(
        tmp_path: Path) -> None:
    """Regression: an engine-written job queued while nothing else was in flight used to end
    the run early, recording it as killed at a deadline that had not come. Ensemble selection
    blends the kept predictions of the portfolio and the drafts."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 200))
    pd.DataFrame({"a": a, "b": b, "y": 3 * a + b**2}).to_csv(tmp_path / "train.csv", index=False)
    # Slow replies and improvements without code: the executor is idle while the LLM writes,
    # and the floor fills it. An improvement fails as soon as it is written, so the replies
    # are slower than a node's run on the holdout (about 4 s here, up to 4x that beside other
    # work): otherwise failed improvements fill the node budget before the floor's first run.
    replies = {"delay": 5.0,
               "draft": [fit_predict_reply("RandomForestRegressor"),
                         fit_predict_reply("ExtraTreesRegressor")],
               "improve": ["I would rather not write code."]}
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    assert main(["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm",
                 f"scripted:{tmp_path / 'replies.json'}", "--max-nodes", "9", "--executors", "1",
                 "--folds", "1", "--budget", "5m", "--quiet", "--select", "valid",
                 "--out", str(tmp_path / "runs")]) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    rows = pd.read_parquet(run / "nodes")
    assert len(rows) == 9
    ensembles = rows[rows.operator == "ensemble"]
    assert len(ensembles) >= 1 and (ensembles.status == "ok").all()
    assert (ensembles.exec_seconds == 0).all()  # blended in the driver: nothing ran
    assert (rows.operator == "portfolio").any()
    best = json.loads((run / "manifest.json").read_text())["result"]
    assert best["best_valid"] == rows[rows.status == "ok"].metric_raw.min()
