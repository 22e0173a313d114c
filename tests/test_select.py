"""The `confirmed` final selection: the baseline root stays unless a node beats it beyond the
valid split's noise; a near-equal engine-written ensemble is preferred to the best single node.

Submissions are built row by row from the hidden valid labels, so how much better each node is
is known exactly."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from engine.config import RunConfig
from engine.evaluation.final import select_final
from engine.evaluation.folds import make_folds
from engine.evaluation.scoring import read_submission, submission_metric
from engine.evaluation.select import (
    CONFIDENCE,
    CV_FOLDS,
    CV_TOP_K,
    METHODS,
    cross_fitted_score,
    one_at_a_time,
    paired_bootstrap,
    resampled_scores,
    select_by_cv,
    select_confirmed,
)
from engine.evaluation.selection import EnsembleCheck, Selection
from engine.records.runs import apply_selection
from engine.records.store import RunStore
from engine.records.summary import overview, selection_section
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from sandbox import ExecResult, Limits
from search.journal import Journal
from search.node import Operator
from tests.helpers import make_node


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000)
    path = tmp_path_factory.mktemp("select") / "d.csv"
    pd.DataFrame({"x": x, "y": np.where(x > 0, "b", "a")}).to_csv(path, index=False)
    return prepare_task(TaskSpec(path, "y", metric="accuracy"))


def right_on(task: PreparedTask, share: float, *, base: int = 0) -> bytes:
    """A valid submission correct on the rows from `base` up to `share` of them, wrong elsewhere
    (so a larger share is right on a superset of a smaller one's rows)."""
    truth = task.valid_y.astype(str).to_numpy()
    wrong = np.where(truth == "a", "b", "a")
    cut = base + int(share * len(truth))
    rows = np.arange(len(truth))
    prediction = np.where((rows >= base) & (rows < cut), truth, wrong)
    out = io.StringIO()
    pd.DataFrame({"prediction": prediction}).to_csv(out, index=False)
    return out.getvalue().encode()


def journal_of(task: PreparedTask, shares: dict[str, tuple[Operator, float]]
               ) -> tuple[Journal, dict[str, bytes]]:
    """Nodes right on the given share of valid rows; a "lucky" one is right on a shifted block,
    so it wins some rows and loses others against the baseline, as real near-equal models do."""
    journal, files = Journal(), {}
    for step, (node_id, (operator, share)) in enumerate(shares.items()):
        files[node_id] = right_on(task, share, base=10 if node_id == "lucky" else 0)
        truth = task.valid_y.astype(str).to_numpy()
        accuracy = float(np.mean(pd.read_csv(io.BytesIO(files[node_id])).prediction == truth))
        journal.add(make_node(node_id, operator=operator, metric=accuracy, step=step))
    return journal, files


def test_paired_bootstrap_sees_a_clear_gain_and_not_a_tiny_one(task: PreparedTask) -> None:
    read = {s: pd.read_csv(io.BytesIO(right_on(task, s))) for s in (0.6, 0.8)}
    lucky = pd.read_csv(io.BytesIO(right_on(task, 0.61, base=10)))
    assert paired_bootstrap(task, read[0.8], read[0.6]) == 1.0
    # 12 rows won, 10 lost of 200: below the confidence asked to replace the baseline.
    assert 0.5 < paired_bootstrap(task, lucky, read[0.6]) < CONFIDENCE
    assert paired_bootstrap(task, read[0.6], read[0.6]) == 0.5


def test_a_node_within_noise_does_not_replace_the_baseline(task: PreparedTask) -> None:
    journal, files = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                       "lucky": (Operator.DRAFT, 0.61)})
    assert journal.best() is journal.get("lucky")
    comparison = select_confirmed(task, journal, files.get)
    assert comparison.winner == "base" and comparison.search_best == "lucky"
    (candidate,) = comparison.candidates
    assert candidate.node_id == "lucky" and (candidate.p_beats_baseline or 0.0) < CONFIDENCE


def test_a_clear_gain_replaces_the_baseline(task: PreparedTask) -> None:
    journal, files = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                       "lucky": (Operator.DRAFT, 0.61),
                                       "good": (Operator.IMPROVE, 0.8)})
    comparison = select_confirmed(task, journal, files.get)
    assert comparison.winner == "good" and comparison.baseline == "base"
    assert [c.node_id for c in comparison.candidates] == ["good", "lucky"]


def test_copies_of_one_prediction_set_take_one_candidate_slot(task: PreparedTask) -> None:
    shares = {"base": (Operator.BASELINE, 0.6)}
    shares |= {f"copy{i}": (Operator.DRAFT, 0.62) for i in range(6)}
    shares |= {"good": (Operator.IMPROVE, 0.61)}
    journal, files = journal_of(task, shares)
    comparison = select_confirmed(task, journal, files.get)
    # Six nodes with byte-identical predictions: one is checked, and the next distinct node
    # still gets its check although five slots would otherwise be full.
    assert [c.node_id for c in comparison.candidates] == ["copy0", "good"]
    assert dict(comparison.same_predictions) == {f"copy{i}": "copy0" for i in range(1, 6)}
    assert comparison.winner == "copy0"
    selection = Selection("confirmed", METHODS["confirmed"], "copy0", "draft", comparison)
    summary = "\n".join(selection_section(selection, "accuracy"))
    assert "same valid predictions as a candidate: copy1 (= copy0)" in summary


def test_a_near_equal_ensemble_is_preferred_a_clearly_worse_one_is_not(
        task: PreparedTask) -> None:
    journal, files = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                       "good": (Operator.IMPROVE, 0.8),
                                       "near": (Operator.ENSEMBLE, 0.795)})
    comparison = select_confirmed(task, journal, files.get)
    check = comparison.ensemble_check
    assert comparison.winner == "near" and check is not None
    assert check == EnsembleCheck("near", "good", check.p_best_beats_it, True)
    assert check.p_best_beats_it < CONFIDENCE
    journal, files = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                       "good": (Operator.IMPROVE, 0.9),
                                       "far": (Operator.ENSEMBLE, 0.75)})
    comparison = select_confirmed(task, journal, files.get)
    check = comparison.ensemble_check
    assert comparison.winner == "good" and check is not None and not check.preferred
    assert check.p_best_beats_it >= CONFIDENCE


def test_without_kept_predictions_it_falls_back_to_the_best_valid(task: PreparedTask) -> None:
    journal, _ = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                   "good": (Operator.IMPROVE, 0.8)})
    comparison = select_confirmed(task, journal, lambda node_id: None)
    assert comparison.winner == "good" and "no kept predictions" in comparison.note


def test_the_manifest_winner_becomes_the_journal_final(task: PreparedTask, tmp_path: Path
                                                       ) -> None:
    journal, _ = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                   "lucky": (Operator.DRAFT, 0.61)})
    assert journal.final() is journal.get("lucky")
    apply_selection(journal, {"selection": {"winner": "base"}})
    assert journal.final() is journal.get("base") and journal.best() is journal.get("lucky")
    apply_selection(journal, {"selection": {"winner": "gone"}})  # not in this journal: ignored
    assert journal.final() is journal.get("base")


def test_an_ensemble_answer_is_also_scored_cross_fitted(task: PreparedTask) -> None:
    journal, files = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                       "good": (Operator.IMPROVE, 0.8),
                                       "blend": (Operator.ENSEMBLE, 0.8)})
    truth = task.valid_y
    # Not an ensemble, or an ensemble without its candidates in the hint: nothing to say.
    assert cross_fitted_score(task, journal.get("good"), files.get, truth,
                              np.zeros(len(truth), dtype=int)) is None
    assert cross_fitted_score(task, journal.get("blend"), files.get, truth,
                              np.zeros(len(truth), dtype=int)) is None
    blend = replace(journal.get("blend"), hint="good,base")
    # `good` is right on a superset of `base`'s rows: whatever rows choose the weights, `good`
    # alone is chosen, so the cross-fitted score is its score; the holdout (one fold) is cut
    # into groups at random.
    holdout = make_folds(task, 1).groups()
    assert len(holdout) == len(truth) and len(np.unique(holdout)) == 5
    for groups in (holdout, np.arange(len(truth)) % 5):
        assert cross_fitted_score(task, blend, files.get, truth, groups) == pytest.approx(0.8)
    missing = replace(blend, hint="good,gone")
    assert cross_fitted_score(task, missing, files.get, truth, np.arange(len(truth)) % 5) is None
    manifest = {"selection": {"winner": "blend", "cross_fitted_raw": 0.79}}  # an older run's
    journal = Journal([journal.get("base"), journal.get("good"), blend])
    apply_selection(journal, manifest)
    rows = dict(overview(journal, {"best_valid": 0.8}, target="y", task_type="binary",
                         metric="accuracy", maximize=True, selection=Selection.read(manifest)))
    assert rows["answer's valid accuracy"].endswith(
        "its weights were selected on these same rows: cross-fitted, each fold blended with "
        "weights selected on the other folds, 0.79)")


def test_the_final_selection_records_an_ensemble_answers_cross_fitted_score(
        task: PreparedTask, tmp_path: Path) -> None:
    journal, files = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                       "good": (Operator.IMPROVE, 0.8),
                                       "blend": (Operator.ENSEMBLE, 0.81)})
    journal = Journal([journal.get("base"), journal.get("good"),
                       replace(journal.get("blend"), hint="good,base")])
    store = RunStore.create(tmp_path / "runs", task, {"config": {}})  # no folds: the holdout
    test_csv = pd.DataFrame({"prediction": task.test_y.astype(str)}).to_csv(index=False).encode()
    for node_id in ("base", "good", "blend"):
        store.append(journal.get(node_id), test_metric_raw=1.0)
        store.write_predictions(node_id, files[node_id], test_csv)

    def no_runs(*args: object) -> ExecResult:
        raise AssertionError("selection by valid score with kept predictions runs nothing")

    record = select_final(store, task, journal, {}, RunConfig(select="valid", save_model=False),
                          Console(quiet=True), no_runs, one_at_a_time(no_runs))
    # `good` is right on a superset of `base`'s rows: chosen on any rows, the weights are
    # `good` alone, so the blend's cross-fitted score is good's; a single answer has none.
    assert record.node_id == "blend" and record.operator == "ensemble"
    assert record.rule == "valid" and record.cross_fitted_raw == pytest.approx(0.8)
    assert journal.final() is journal.get("blend")
    journal = Journal([journal.get("base"), journal.get("good")])
    record = select_final(store, task, journal, {}, RunConfig(select="valid", save_model=False),
                          Console(quiet=True), no_runs, one_at_a_time(no_runs))
    assert record.node_id == "good" and record.cross_fitted_raw is None
    assert "cross_fitted_raw" not in record.to_json()


def test_the_headline_names_the_answer_and_the_unchosen_best(task: PreparedTask) -> None:
    journal, _ = journal_of(task, {"base": (Operator.BASELINE, 0.6),
                                   "lucky": (Operator.DRAFT, 0.61)})
    apply_selection(journal, {"selection": {"winner": "base"}})
    facts = {"best_valid": journal.get("base").metric_raw}
    pairs = overview(journal, facts, target="y", task_type="binary", metric="accuracy",
                     maximize=True)
    rows = dict(pairs)
    assert rows["answer's valid accuracy"].startswith("0.6 (node base, baseline)")
    labels = [label for label, _ in pairs]
    assert labels.index("its cost") < labels.index("best valid accuracy")
    assert rows["best valid accuracy"].startswith("0.61 (node lucky, draft): not the answer")
    apply_selection(journal, {"selection": {"winner": "lucky"}})
    rows = dict(overview(journal, facts, target="y", task_type="binary", metric="accuracy",
                         maximize=True))
    assert "best valid accuracy" not in rows


@pytest.mark.parametrize(("kind", "metric"), [
    ("binary", "accuracy"), ("binary", "f1"), ("multiclass", "f1_weighted"),
    ("multiclass", "accuracy"), ("binary", "roc_auc"), ("multiclass", "log_loss"),
    ("binary", "log_loss"),
    ("regression", "rmse"), ("regression", "mae"), ("regression", "r2"),
])
@pytest.mark.parametrize("digits", [None, 1])  # 1: probabilities rounded, many ties
def test_resampled_scores_equal_the_scorer_on_each_resample(
        tmp_path: Path, kind: str, metric: str, digits: int | None) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=400)
    y: object = {"binary": np.where(x > 0, "yes", "no"),
                 "multiclass": np.digitize(x, [-0.5, 0.5]).astype(str),
                 "regression": 3 * x + rng.normal(size=400)}[kind]
    pd.DataFrame({"x": x, "y": y}).to_csv(tmp_path / "d.csv", index=False)
    task = prepare_task(TaskSpec(tmp_path / "d.csv", "y", metric=metric))
    n = len(task.valid_y)
    if kind == "regression":
        frame = pd.DataFrame({"prediction": task.valid_y.to_numpy() + rng.normal(size=n)})
    else:
        proba = rng.dirichlet(np.ones(len(task.labels)), size=n)
        if digits is not None:
            proba = proba.round(digits)
        frame = pd.DataFrame({"prediction": np.asarray(task.labels)[proba.argmax(axis=1)]})
        for i, label in enumerate(task.labels):
            frame[f"proba_{label}"] = proba[:, i]
    submission = read_submission(task, frame.to_csv(index=False).encode(), "valid")
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(5)])
    fast = resampled_scores(task, submission, counts.astype(float))
    for row_counts, value in zip(counts, fast, strict=True):
        rows = np.repeat(np.arange(n), row_counts)
        expected = submission_metric(task, submission.iloc[rows].reset_index(drop=True),
                                     task.valid_y.iloc[rows].reset_index(drop=True))
        assert value == pytest.approx(expected, rel=1e-9)


def test_select_by_cv_runs_every_fold_of_the_top_nodes_at_once(task: PreparedTask) -> None:
    """Each node's code names what its fake model does: predict right, predict "a" always, or
    fail from its third fold on. The 15 runs go to the executors in one batch."""
    nodes = [make_node("right", metric=0.9, code="right\n"),
             make_node("all_a", metric=0.8, code="all_a\n"),
             make_node("breaks", metric=0.7, code="breaks\n"),
             make_node("fourth", metric=0.6, code="right\n")]
    batches: list[int] = []
    seen: dict[str, int] = {}

    def run_all(jobs: list[tuple[str, dict[str, bytes], Limits]]) -> list[ExecResult]:
        batches.append(len(jobs))
        results = []
        for code, inputs, _ in jobs:
            kind = code.splitlines()[0]
            seen[kind] = seen.get(kind, 0) + 1
            x = pd.read_csv(io.BytesIO(inputs["valid.csv"]))["x"]
            labels = np.where(x > 0, "b", "a") if kind == "right" else np.full(len(x), "a")
            out = io.StringIO()
            pd.DataFrame({"prediction": labels}).to_csv(out, index=False)
            failed = kind == "breaks" and seen[kind] >= 3
            results.append(ExecResult("error" if failed else "ok", 1 if failed else 0, "", "",
                                      1.0, None if failed else out.getvalue().encode(), None,
                                      "ValueError: boom" if failed else "", "bwrap"))
        return results

    comparison = select_by_cv(task, Journal(nodes), run_all, seed=0)
    assert batches == [CV_TOP_K * CV_FOLDS]  # the fourth node is not cross-validated
    assert comparison.winner == "right" and comparison.search_best == "right"
    by_id = {s.node_id: s for s in comparison.candidates}
    assert by_id["right"].fold_scores == (1.0,) * CV_FOLDS and by_id["right"].error == ""
    assert by_id["all_a"].cv_mean is not None and by_id["all_a"].cv_mean < 0.7
    assert by_id["breaks"].error == "fold 3: error ValueError: boom"
    assert len(by_id["breaks"].fold_scores) == 2 and by_id["breaks"].cv_mean is None
