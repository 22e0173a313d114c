"""Engine-written ensembles: member choice, greedy proposals, and the script run for real."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from engine.run import main
from operators.context import TaskContext
from operators.harness import assemble, ensemble_code
from sandbox import Limits, run_script
from search.ensemble import members, next_members, plan, tried
from search.greedy import GreedyPolicy
from search.journal import Journal
from search.node import MODEL_START, Node, Operator, Status
from tests.helpers import make_node


def model(body: str) -> str:
    """Model code whose fit_predict returns `body` for both valid and test rows."""
    return f"def fit_predict(X, y, X_valid, X_test):\n    return {body}\n"


def harnessed(node_id: str, metric: float, step: int, **kw: object) -> Node:
    ctx = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                      maximize=False)
    return make_node(node_id, metric=metric, step=step,
                     code=assemble(ctx, model(f"[{metric}] * len(X_valid), [0] * len(X_test)")),
                     **kw)  # type: ignore[arg-type]


def test_members_skip_clones_plain_scripts_and_ensembles() -> None:
    journal = Journal([
        harnessed("a", 0.9, 0),
        harnessed("b", 0.9, 1),  # same score as a: a clone, adds nothing
        make_node("c", metric=0.95, step=2),  # a whole script: no model code to reuse
        harnessed("d", 0.8, 3),
        harnessed("e", 0.99, 4, operator=Operator.ENSEMBLE),
        harnessed("f", 0.7, 5),
    ])
    assert members(journal, 2) == ["a", "d"]
    assert members(journal, 3) == ["a", "d", "f"]
    assert members(journal, 4) is None


def test_tried_sets_are_read_back_from_plans() -> None:
    base = [harnessed("a", 0.9, 0), harnessed("d", 0.8, 1), harnessed("f", 0.7, 2)]
    journal = Journal(base)
    assert next_members(journal, (2, 3)) == ["a", "d"]
    done = make_node("g", "a", operator=Operator.ENSEMBLE, step=3, status=Status.BUGGY)
    journal.add(replace(done, plan=plan(["a", "d"], vote=False)))
    assert tried(journal) == {frozenset({"a", "d"})}
    assert next_members(journal, (2, 3)) == ["a", "d", "f"]
    assert next_members(journal, (2,)) is None


def test_greedy_proposes_each_set_once_and_never_edits_an_ensemble() -> None:
    journal = Journal([harnessed("a", 0.9, 0), harnessed("d", 0.8, 1)])
    policy = GreedyPolicy(seed=0, num_drafts=0, debug_prob=0.0, ensemble_sizes=(2, 3))
    first, second = policy.propose(journal, 2, {})
    assert (first.operator, first.parent_id, first.hint) == (Operator.ENSEMBLE, "a", "a,d")
    assert second.operator is Operator.IMPROVE  # one ensemble in flight at a time
    ens = harnessed("e", 0.95, 2, operator=Operator.ENSEMBLE)
    journal.add(replace(ens, parent_id="a", plan=plan(["a", "d"], vote=False)))
    (after,) = policy.propose(journal, 1, {})
    # The ensemble is now the best node, but improvements go to the best LLM-written one.
    assert (after.operator, after.parent_id) == (Operator.IMPROVE, "a")
    assert GreedyPolicy(seed=0, num_drafts=0, ensemble_sizes=()).propose(
        Journal([harnessed("a", 0.9, 0), harnessed("d", 0.8, 1)]), 1, {}
    )[0].operator is Operator.IMPROVE


INPUTS = {
    "train.csv": b"x,y\n1,a\n2,b\n3,a\n",
    "valid.csv": b"x\n1\n2\n3\n",
    "test.csv": b"x\n4\n5\n",
}


def run_ensemble(ctx: TaskContext, bodies: list[str]) -> pd.DataFrame:
    code = ensemble_code(ctx, [assemble(ctx, model(b)) for b in bodies])
    assert MODEL_START in code
    result = run_script(code, INPUTS, Limits(wall_seconds=60))
    assert result.status == "ok", result.stderr_tail
    return pd.read_csv(io.BytesIO(result.valid_csv))


def test_mean_of_numbers_runs_in_the_sandbox() -> None:
    ctx = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                      maximize=False)
    out = run_ensemble(ctx, ["[1.0, 2.0, 3.0], [0, 0]", "np.array([3.0, 4.0, 5.0]), [0, 0]"])
    assert out.prediction.tolist() == [2.0, 3.0, 4.0]


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


def fit_predict_reply(estimator: str) -> str:
    return (f"A {estimator}.\n```python\nfrom sklearn.ensemble import {estimator}\n\n"
            "def fit_predict(X, y, X_valid, X_test):\n"
            "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
            f"    model = {estimator}(n_estimators=20, random_state=0).fit(X, y)\n"
            "    return model.predict(X_valid), model.predict(X_test)\n```\n")


def test_ensembles_run_in_the_loop_and_the_run_uses_its_whole_node_budget(
        tmp_path: Path) -> None:
    """Regression: an engine-written job queued while nothing else was in flight used to end
    the run early, recording that ensemble as killed at a deadline that had not come."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 200))
    pd.DataFrame({"a": a, "b": b, "y": 3 * a + b**2}).to_csv(tmp_path / "train.csv", index=False)
    # Slow replies and improvements without code: the executor is idle when a reply fails,
    # and the policy's next proposal is an ensemble.
    replies = {"delay": 1.5,
               "draft": [fit_predict_reply("RandomForestRegressor"),
                         fit_predict_reply("ExtraTreesRegressor")],
               "improve": ["I would rather not write code."]}
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    assert main(["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm",
                 f"scripted:{tmp_path / 'replies.json'}", "--max-nodes", "9", "--executors", "1",
                 "--budget", "5m", "--quiet", "--select", "valid",
                 "--out", str(tmp_path / "runs")]) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    rows = pd.read_parquet(run / "nodes")
    assert len(rows) == 9
    ensembles = rows[rows.operator == "ensemble"]
    assert len(ensembles) >= 1 and (ensembles.status == "ok").all()
    best = json.loads((run / "manifest.json").read_text())["result"]
    assert best["best_valid"] == rows[rows.status == "ok"].metric_raw.min()
