"""The `Selection` record: why a run chose its answer, made once by the final selection, kept in
the manifest (older runs' dicts read too) and rendered from the record by summary.md,
`engine.show` and tree.html (pure but for one small store; no search, under a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.evaluation.select import METHODS
from engine.evaluation.selection import (
    Candidate,
    Comparison,
    EnsembleCheck,
    Refit,
    Selection,
)
from engine.records.outputs import write_outputs
from engine.records.runs import open_run
from engine.records.store import RunStore
from engine.records.summary import selection_section, summary_facts, write_summary
from engine.show import main as show_main
from search.node import Operator
from tests.helpers import make_node
from tests.test_outputs import embedded_data, small_store

CONFIRMED = Selection(
    "confirmed", METHODS["confirmed"], "blend", "ensemble",
    Comparison("blend", "good", "base", 0.9,
               (Candidate("good", "improve", 0.8, p_beats_baseline=0.99, test_raw=0.78),
                Candidate("blend", "ensemble", 0.79, p_beats_baseline=0.97, test_raw=0.8),
                Candidate("lucky", "draft", 0.61, p_beats_baseline=0.55)),
               (("copy", "good"),), EnsembleCheck("blend", "good", 0.62, True)),
    cross_fitted_raw=0.785, model={"saved": False, "reason": "a random step outside the fits"})


def read(record: dict[str, object]) -> Selection | None:
    return Selection.read({"selection": json.loads(json.dumps(record))})


def test_the_record_reads_back_from_the_manifests_json() -> None:
    assert read(CONFIRMED.to_json()) == CONFIRMED
    cv = Selection("cv", METHODS["cv"], "a", "draft", Comparison(
        "a", "b", candidates=(Candidate("a", "draft", 0.7, fold_scores=(0.6, 0.8)),
                              Candidate("b", "improve", 0.9, fold_scores=(0.5,),
                                        error="fold 2: timeout"))),
        refit=Refit(error="the refit failed"))
    assert read(cv.to_json()) == cv
    assert cv.to_json()["candidates"][0]["cv_mean"] == pytest.approx(0.7)
    assert read({}) is None and Selection.read({}) is None


def test_an_older_runs_dict_reads_as_a_record() -> None:
    """The dicts runs wrote before the record: no rule, operator, baseline or threshold."""
    confirmed = read({
        "method": METHODS["confirmed"], "search_best": "good", "winner": "blend",
        "candidates": [{"node_id": "good", "operator": "improve", "valid_raw": 0.8,
                        "p_beats_baseline": 0.99, "test_raw": 0.78},
                       {"node_id": "blend", "operator": "ensemble", "valid_raw": 0.79,
                        "p_beats_baseline": 0.97, "test_raw": 0.8}],
        "ensemble_check": {"node_id": "blend", "p_best_beats_it": 0.62},
        "cross_fitted_raw": 0.785, "model": {"saved": True}})
    assert confirmed is not None
    assert (confirmed.rule, confirmed.node_id, confirmed.operator) == ("confirmed", "blend",
                                                                       "ensemble")
    assert confirmed.comparison.ensemble_check == EnsembleCheck("blend", "good", 0.62, True)
    assert "preferred" in confirmed.reason() and "(good)" in confirmed.reason()
    cv = read({"method": "5-fold cv on train+valid", "winner": "a", "candidates": [
        {"node_id": "a", "valid_raw": 0.7, "fold_scores": [0.6, 0.8], "error": "",
         "cv_mean": 0.7, "cv_sd": 0.14, "test_raw": 0.5}]})
    assert cv is not None and cv.rule == "cv" and cv.candidates[0].cv_mean == pytest.approx(0.7)
    assert cv.reason() == "the best mean score of the cross-validation (cv 0.7 ± 0.14)"
    valid = read({"method": "best valid score", "winner": "x", "refit": {"test_raw": 0.7}})
    assert valid is not None and valid.rule == "valid" and valid.refit_test_raw == 0.7
    nothing = read({"method": "confirmed", "winner": None})
    assert nothing is not None and nothing.node_id is None and nothing.rule == "confirmed"
    assert selection_section(nothing, "accuracy") == []


def test_the_reason_says_which_comparison_decided() -> None:
    stays = Selection("confirmed", METHODS["confirmed"], "base", "baseline", Comparison(
        "base", "lucky", "base", 0.9, (Candidate("lucky", "draft", 0.61, p_beats_baseline=0.55),)))
    assert stays.reason() == ("the baseline root stays: no node above it beat it in 90% of "
                              "resamples (1 compared)")
    beats = Selection("confirmed", METHODS["confirmed"], "good", "improve", Comparison(
        "good", "good", "base", 0.9, (Candidate("good", "improve", 0.8, p_beats_baseline=0.99),),
        ensemble_check=EnsembleCheck("far", "good", 0.95, False)))
    assert beats.reason().startswith("it beats the baseline root (base) in 99.0% of resamples")
    assert beats.reason().endswith("ensemble far not preferred: it beats that in 95.0% of "
                                   "resamples")
    fallback = Selection("confirmed", METHODS["confirmed"], "good", "improve",
                         Comparison("good", "good", "base", 0.9), note="it failed when re-run")
    assert fallback.reason() == "it failed when re-run"
    assert fallback.to_json()["note"] == "it failed when re-run"


def test_summary_show_and_tree_html_render_the_record(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [make_node("base", operator=Operator.BASELINE, metric=0.6, step=0),
             make_node("good", "base", metric=0.8, step=1),
             make_node("lucky", metric=0.61, step=2),
             make_node("blend", "good", operator=Operator.ENSEMBLE, metric=0.79, step=3)]
    root = small_store(tmp_path, nodes, {"good": 0.78, "blend": 0.8})
    RunStore.open(root).update_manifest(selection=CONFIRMED.to_json())
    run = open_run(root)
    assert run.selection == CONFIRMED and run.journal.final() is run.journal.get("blend")

    text = write_summary(root, run.task(), run.journal, run.tests,
                         summary_facts(run.journal, run.tests, {}, run.selection),
                         run.selection).read_text()
    assert "- rule: `--select confirmed` (confirmed: beats the baseline root in >= 90%" in text
    assert f"- answer: node blend (ensemble): {CONFIRMED.reason()}" in text
    assert "| blend | ensemble | 0.79 | beats the baseline in 97.0% of resamples | 0.8 | " \
           "**in best/** |" in text
    assert "same valid predictions as a candidate: copy (= good)" in text
    assert "cross-fitted, each fold blended with weights selected on the other folds, 0.785" in text
    assert "The best valid score (good) is not the answer: best/ holds blend." in text
    assert "(not saved: a random step outside the fits)" in text  # the record's model

    assert show_main([str(root)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Final selection" in out and "--select confirmed" in out and "preferred" in out

    write_outputs(root)
    data = embedded_data((root / "tree.html").read_text())
    assert data["best"] == "blend"
    view = data["selection"]
    assert view["rule"] == "confirmed" and view["node"] == "blend"
    assert view["reason"] == CONFIRMED.reason()
    assert view["candidates"]["lucky"] == "beats the baseline in 55.0% of resamples"
    assert "test" not in json.dumps(view)  # the tree never shows a test score
