"""Ensemble selection (Caruana) and the combination of predictions: hand-checkable cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.evaluation.blend import (
    blend,
    blend_scorer,
    cross_fitted,
    prediction_matrix,
    select_weights,
)
from engine.evaluation.scoring import combine_predictions, submission_metric
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task


def make_task(tmp: Path, target: pd.Series, metric: str) -> PreparedTask:
    frame = pd.DataFrame({"a": np.arange(len(target)), "y": target})
    frame.to_csv(tmp / f"{metric}.csv", index=False)
    return prepare_task(TaskSpec(tmp / f"{metric}.csv", "y", None, metric, ""))


@pytest.fixture(scope="module")
def regression(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    rng = np.random.default_rng(0)
    return make_task(tmp_path_factory.mktemp("blend"), pd.Series(rng.normal(size=200)), "rmse")


def test_two_errors_that_cancel_are_both_picked(regression: PreparedTask) -> None:
    truth = regression.valid_y.reset_index(drop=True)
    up = pd.DataFrame({"prediction": truth + 1.0})
    down = pd.DataFrame({"prediction": truth - 1.0})
    noise = pd.DataFrame({"prediction": truth + np.random.default_rng(1).normal(0, 3, len(truth))})
    weights = select_weights(regression, {"up": up, "noise": noise, "down": down}, truth)
    assert weights["up"] == weights["down"] and "noise" not in weights
    mixed = blend(regression, {"up": up, "down": down}, weights)
    assert submission_metric(regression, mixed, truth) == pytest.approx(0.0, abs=1e-9)


def test_a_cost_budget_keeps_the_picked_members_within_it(regression: PreparedTask) -> None:
    truth = regression.valid_y.reset_index(drop=True)
    noise = np.random.default_rng(2).normal(0, 0.3, len(truth))
    candidates = {"up": pd.DataFrame({"prediction": truth + 1.0 + noise}),
                  "down": pd.DataFrame({"prediction": truth - 2.0 + noise}),
                  "slow": pd.DataFrame({"prediction": truth + 0.01})}
    costs = {"up": 3.0, "down": 4.0, "slow": 50.0}
    # Unbounded, the near-exact slow node wins; within 8, the pair that cancels at 2 to 1,
    # up paid for once (7, not 10); within 5, one of them alone; within 2, nothing.
    assert select_weights(regression, candidates, truth) == {"slow": 1}
    assert select_weights(regression, candidates, truth, costs=costs, budget=8.0) == {
        "up": 2, "down": 1}
    assert len(select_weights(regression, candidates, truth, costs=costs, budget=5.0)) == 1
    assert select_weights(regression, candidates, truth, costs=costs, budget=2.0) == {}


def test_the_best_single_model_alone_when_nothing_helps(regression: PreparedTask) -> None:
    truth = regression.valid_y.reset_index(drop=True)
    good = pd.DataFrame({"prediction": truth + 0.1})
    bad = pd.DataFrame({"prediction": truth + 2.0})
    assert select_weights(regression, {"bad": bad, "good": good}, truth) == {"good": 1}
    assert select_weights(regression, {}, truth) == {}


def test_cross_fitting_scores_weights_on_rows_they_were_not_chosen_on(
        regression: PreparedTask) -> None:
    truth = regression.valid_y.reset_index(drop=True)
    groups = np.arange(len(truth)) % 2
    # Each candidate is exact on one group and 5 off on the other: chosen on all rows, the
    # blend averages them (2.5 off everywhere); chosen on one group, the weights pick the
    # candidate that is exact there and 5 off on the group they are applied to.
    left = pd.DataFrame({"prediction": truth + np.where(groups == 0, 0.0, 5.0)})
    right = pd.DataFrame({"prediction": truth + np.where(groups == 1, 0.0, 5.0)})
    candidates = {"left": left, "right": right}
    weights = select_weights(regression, candidates, truth)
    in_sample = submission_metric(regression, blend(regression, candidates, weights), truth)
    crossed = submission_metric(regression, cross_fitted(regression, candidates, truth, groups),
                                truth)
    assert in_sample == pytest.approx(2.5) and crossed == pytest.approx(5.0)
    # One candidate best everywhere: the same weights on every group, the same score.
    good = pd.DataFrame({"prediction": truth + 0.1})
    bad = pd.DataFrame({"prediction": truth + 2.0})  # same side: mixing it in only hurts
    alone = cross_fitted(regression, {"good": good, "bad": bad}, truth, groups)
    assert alone["prediction"].tolist() == pytest.approx(good["prediction"].tolist())
    with pytest.raises(ValueError, match="two groups"):
        cross_fitted(regression, candidates, truth, np.zeros(len(truth), dtype=int))


def test_probabilities_average_and_labels_vote(tmp_path: Path) -> None:
    labels = pd.Series(["a", "b", "c"] * 20)
    task = make_task(tmp_path, labels, "log_loss")
    rows = 3
    first = pd.DataFrame({"prediction": ["a"] * rows, "proba_a": [0.8] * rows,
                          "proba_b": [0.1] * rows, "proba_c": [0.1] * rows})
    second = pd.DataFrame({"prediction": ["b"] * rows, "proba_a": [0.2] * rows,
                           "proba_b": [0.7] * rows, "proba_c": [0.1] * rows})
    mixed = combine_predictions(task, [first, second], [1, 3])
    assert mixed["proba_a"].tolist() == pytest.approx([0.35] * rows)
    assert mixed["proba_b"].tolist() == pytest.approx([0.55] * rows)
    assert mixed["prediction"].tolist() == ["b"] * rows
    only_labels = [pd.DataFrame({"prediction": ["a", "b", "c"]}),
                   pd.DataFrame({"prediction": ["b", "b", "a"]}),
                   pd.DataFrame({"prediction": ["c", "a", "a"]})]
    assert combine_predictions(task, only_labels)["prediction"].tolist() == ["a", "b", "a"]
    assert combine_predictions(task, only_labels, [1, 1, 3])["prediction"].tolist() == [
        "c", "a", "a"]


@pytest.mark.parametrize(("kind", "metric", "with_proba"), [
    ("regression", "rmse", True), ("regression", "r2", True), ("binary", "roc_auc", True),
    ("binary", "f1", True), ("binary", "f1", False), ("multiclass", "log_loss", True),
    ("multiclass", "f1_weighted", False), ("multiclass", "accuracy", True),
])
def test_each_rounds_score_is_the_score_of_the_blend_it_makes(
        tmp_path: Path, kind: str, metric: str, with_proba: bool) -> None:
    """select_weights scores a blended matrix without building its frame: the same number as
    scoring the blend that those weights give."""
    rng = np.random.default_rng(4)
    n = 120
    target = {"regression": pd.Series(rng.normal(size=n)),
              "binary": pd.Series(rng.choice(["no", "yes"], n)),
              "multiclass": pd.Series(rng.choice(["a", "b", "c"], n))}[kind]
    task = make_task(tmp_path, target, metric)
    truth = task.valid_y.reset_index(drop=True)
    frames = {}
    for name in ("m1", "m2", "m3"):
        if kind == "regression":
            frames[name] = pd.DataFrame({"prediction": truth + rng.normal(size=len(truth))})
            continue
        proba = rng.dirichlet(np.ones(len(task.labels)), size=len(truth))
        frame = pd.DataFrame({"prediction": np.asarray(task.labels)[proba.argmax(axis=1)]})
        if with_proba:
            for i, label in enumerate(task.labels):
                frame[f"proba_{label}"] = proba[:, i]
        frames[name] = frame
    score = blend_scorer(task, frames["m1"], truth)
    for weights in ({"m1": 1}, {"m1": 2, "m3": 1}, {"m1": 1, "m2": 1, "m3": 3}):
        matrix = sum(w * prediction_matrix(task, frames[i]) for i, w in weights.items()) / sum(
            weights.values())
        made = blend(task, frames, weights)
        assert score(matrix) == pytest.approx(
            task.metric.normalise(submission_metric(task, made, truth)), rel=1e-12)
