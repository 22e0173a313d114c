"""The answer's work after the search comes out of the budget: `closing_seconds` estimates it
from the current best's own runs, `Budget.left` keeps it back, and the summary says what it
took against what was kept."""

from __future__ import annotations

import dataclasses
import io
import json
import time
from pathlib import Path

import pandas as pd
import pytest

from engine.budget import Budget
from engine.config import RunConfig
from engine.deploy.saved_model import (
    INFO_FILE,
    MODEL_DIR,
    compose_runs,
    saved_rows,
    training_inputs,
)
from engine.evaluation import folds as folds_module
from engine.evaluation.closing import (
    COMPOSE_SECONDS,
    COMPOSE_SECONDS_PER_MB,
    MAX_CLOSING_SHARE,
    REFIT_SHARE,
    SAVE_SHARE,
    SERVE_SECONDS,
    closing_seconds,
    serve_seconds,
    time_run_seconds,
)
from engine.evaluation.folds import HOLDOUT, make_folds
from engine.evaluation.latency import Timings
from engine.evaluation.rows import refit_rows
from engine.evaluation.select import CV_FOLDS
from engine.records.runs import open_run
from engine.records.summary import summary_facts, write_summary
from engine.run import main as run_main
from engine.search_run import RESUME_SECONDS, task_context
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.fitted import TIME_SECONDS
from operators.harness import assemble
from operators.kinds.ensemble import ensemble_written, weighted_members
from operators.models import model_code
from sandbox import SUBMISSION_CAP
from search.journal import Journal
from search.node import Node, Operator
from tests.helpers import make_data, make_node


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    data = tmp_path_factory.mktemp("closing") / "d.csv"
    data.write_text("a,b,y\n" + "".join(f"{i},{i % 5},{i % 7 * 2.5}\n" for i in range(200)))
    return prepare_task(TaskSpec(data, "y"))


def config(**changes: object) -> RunConfig:
    return dataclasses.replace(RunConfig(), budget=600.0, **changes)  # type: ignore[arg-type]


def ensemble_of(task: PreparedTask, journal: Journal, weights: dict[str, int]) -> Node:
    """An ensemble node as the step writes it: its plan names the weighted members."""
    members = [journal.get(i) for i in weights]
    written = ensemble_written(task_context(task, 0), members, weights,
                               candidates=len(journal))
    node = make_node("e" * 12, operator=Operator.ENSEMBLE, metric=0.99, exec_seconds=0.0)
    return dataclasses.replace(node, plan=written.plan,
                               hint=",".join(n.node_id for n in journal))  # every candidate


def kept_ensemble(task: PreparedTask, count: int) -> tuple[list[Node], Node]:
    """`count` nodes of make_model() code (40 s each, metric 0.1 a step) and the ensemble of
    the third and the second, as the step writes it, its code the members' own."""
    ctx = task_context(task, 0)
    code = assemble(ctx, model_code(ctx, "lgbm", {"n_estimators": 20}))
    nodes = [make_node(f"{i:012x}", metric=0.1 * i, exec_seconds=40.0, code=code)
             for i in range(1, count + 1)]
    journal = Journal(nodes)
    weights = {"000000000003": 1, "000000000002": 1}
    written = ensemble_written(ctx, [journal.get(i) for i in weights], weights, len(journal))
    return nodes, dataclasses.replace(ensemble_of(task, journal, weights), code=written.code)


def test_the_plan_names_the_weighted_members_in_order(task: PreparedTask) -> None:
    journal = Journal([make_node(f"{i:012x}", metric=0.1 * i) for i in range(1, 5)])
    node = ensemble_of(task, journal, {"000000000003": 3, "000000000001": 1})
    assert weighted_members(node) == ["000000000003", "000000000001"]
    assert weighted_members(make_node("a" * 12)) == []


def test_a_k_fold_answer_keeps_back_its_save_only(task: PreparedTask) -> None:
    folds = make_folds(task, 5)
    journal = Journal([make_node("n1", metric=0.5, exec_seconds=12.0)])
    # (and serving the saved answer once to time it: a node of no known size)
    assert closing_seconds(journal, config(), folds, task, 1) == pytest.approx(
        SAVE_SHARE * 12.0 + SERVE_SECONDS)
    # Nothing to save and nothing to refit: the search keeps the whole budget.
    assert closing_seconds(journal, config(save_model=False), folds, task, 1) == 0.0
    assert closing_seconds(Journal(), config(), folds, task, 1) == 0.0


def test_an_answer_put_together_from_kept_models_keeps_back_its_compose_runs(
        task: PreparedTask) -> None:
    folds = make_folds(task, 5)
    nodes, ensemble = kept_ensemble(task, 3)
    journal = Journal([*nodes, ensemble])
    mib = 2**20
    small = {"000000000003": [mib] * 5, "000000000002": [mib] * 5}
    one_run = COMPOSE_SECONDS + COMPOSE_SECONDS_PER_MB * 10
    # and, before it, the time run over its members' kept models (engine/evaluation/latency.py)
    timing = COMPOSE_SECONDS + COMPOSE_SECONDS_PER_MB * 10 + 2 * TIME_SECONDS
    assert time_run_seconds(list(small.values())) == pytest.approx(timing)
    # and after it, serving the saved answer once to time it as served (10 MiB)
    assert closing_seconds(journal, config(), folds, task, 2, small) == pytest.approx(
        one_run + timing + serve_seconds(10))
    # 236.5 MiB over five folds (README command 1, six members): more than one run may hand
    # back, so two runs side by side, or one after the other on one executor.
    big = {"000000000003": [24 * mib] * 5, "000000000002": [23 * mib] * 5}
    assert compose_runs(list(big.values())) == [[0, 1, 2], [3, 4]]
    timing = time_run_seconds(list(big.values()))
    assert closing_seconds(journal, config(), folds, task, 2, big) == pytest.approx(
        COMPOSE_SECONDS + COMPOSE_SECONDS_PER_MB * 235 + timing + serve_seconds(235))
    assert closing_seconds(journal, config(), folds, task, 1, big) == pytest.approx(
        2 * COMPOSE_SECONDS + COMPOSE_SECONDS_PER_MB * 235 + timing + serve_seconds(235))
    # A member not kept, or a fold too big for any run: the members are fitted again (and the
    # kept ones timed).
    fitted = SAVE_SHARE * 80.0 * 3 / 5 + SERVE_SECONDS
    one = {"000000000003": [mib] * 5}
    assert closing_seconds(journal, config(), folds, task, 2, one) == pytest.approx(
        fitted + time_run_seconds([[mib] * 5]))
    huge = {**small, "000000000002": [SUBMISSION_CAP] * 5}
    assert closing_seconds(journal, config(), folds, task, 2, huge) == pytest.approx(
        min(fitted + time_run_seconds(list(huge.values())), MAX_CLOSING_SHARE * config().budget))


def test_the_reserve_for_an_ensemble_the_best_may_give_way_to_times_its_members_alone(
        task: PreparedTask) -> None:
    # The best (a single node) is not held back: the ensemble it may give way to is timed over
    # its members' kept models, not over every kept node's.
    folds = make_folds(task, 5)
    nodes, ensemble = kept_ensemble(task, 7)
    ensemble = dataclasses.replace(ensemble, metric=0.65)
    journal = Journal([*nodes, ensemble])
    assert journal.best().node_id == "000000000007"  # type: ignore[union-attr]
    kept = {n.node_id: [2**20] * 5 for n in nodes}  # every node's fold models kept
    as_best = Journal([*nodes, dataclasses.replace(ensemble, metric=0.9)])
    assert closing_seconds(journal, config(), folds, task, 2, kept) == pytest.approx(
        closing_seconds(as_best, config(), folds, task, 2, kept))


def test_the_saved_fits_run_in_rounds_of_the_executors(task: PreparedTask) -> None:
    # 5 fold fits on 2 executors: 3 rounds of the 5 the scoring took one after the other.
    folds = make_folds(task, 5)
    journal = Journal([make_node("n1", metric=0.5, exec_seconds=10.0)])
    assert closing_seconds(journal, config(), folds, task, 2) == pytest.approx(
        SAVE_SHARE * 10.0 * 3 / 5 + SERVE_SECONDS)
    assert closing_seconds(journal, config(), folds, task, 8) == pytest.approx(
        SAVE_SHARE * 10.0 / 5 + SERVE_SECONDS)
    # the holdout's one refit cannot be split
    holdout = make_folds(task, HOLDOUT)
    assert closing_seconds(journal, config(), holdout, task, 2) == closing_seconds(
        journal, config(), holdout, task, 1)


def test_the_reserve_is_kept_for_the_answer_the_one_row_limit_leaves(task: PreparedTask) -> None:
    # The best's fold models were too big to keep (saving it fits it again: 100 s of scoring
    # runs); once it is timed over the limit, the answer is the quick node, put together from
    # its kept models: the reserve is that one's, as if the best were not there.
    folds = make_folds(task, 5)
    quick = make_node("000000000001", metric=0.5, exec_seconds=10.0)
    slow = make_node("000000000002", metric=0.6, exec_seconds=100.0)
    journal, kept = Journal([quick, slow]), {quick.node_id: [2**20] * 5}
    refit = closing_seconds(journal, config(), folds, task, 1, kept)
    assert refit == pytest.approx(SAVE_SHARE * 100.0 + SERVE_SECONDS)
    composed = closing_seconds(Journal([quick]), config(), folds, task, 1, kept)
    assert composed < refit / 2
    over = Timings(1.0, {quick.node_id: 3.0, slow.node_id: 30.0})
    # timed already, the quick node's time run is not kept back for again
    assert closing_seconds(journal, config(), folds, task, 1, kept, over) == pytest.approx(
        composed - time_run_seconds([[2**20] * 5]))
    # A node kept since those time runs is timed when the best is held back again.
    later = make_node("000000000003", metric=0.4, exec_seconds=10.0)
    journal.add(later)
    assert closing_seconds(journal, config(), folds, task, 1, {**kept, later.node_id: [2**20] * 5},
                           over) == pytest.approx(composed)
    # Within the limit, or not measured, the best stays the answer; a stated limit counts.
    within = Timings(1.0, {quick.node_id: 3.0, slow.node_id: 10.0})
    assert closing_seconds(journal, config(), folds, task, 1, kept, within) == refit
    unmeasured = Timings(1.0, {quick.node_id: 3.0})
    assert closing_seconds(journal, config(), folds, task, 1, kept, unmeasured) == refit
    assert closing_seconds(journal, config(max_predict_ms_per_row=50.0), folds, task, 1, kept,
                           over) == refit


def test_an_ensemble_counts_its_weighted_members_not_every_candidate(
        task: PreparedTask) -> None:
    folds = make_folds(task, 5)
    nodes = [make_node(f"{i:012x}", metric=0.1 * i, exec_seconds=10.0 * i) for i in range(1, 6)]
    journal = Journal(nodes)
    journal.add(ensemble_of(task, journal, {"000000000005": 2, "000000000002": 1}))
    best = journal.best()
    assert best is not None and best.operator is Operator.ENSEMBLE
    assert closing_seconds(journal, config(), folds, task, 1) == pytest.approx(
        SAVE_SHARE * (50.0 + 20.0) + SERVE_SECONDS)


def test_the_reserve_holds_the_best_ensemble_a_single_best_may_give_way_to(
        task: PreparedTask) -> None:
    # The best is a 2 s node; the best ensemble, a little below it, has members of 10 s and
    # 20 s: if it overtook the best at the search's end, its work would be the answer's.
    folds = make_folds(task, 5)
    nodes = [make_node("000000000001", metric=0.5, exec_seconds=10.0),
             make_node("000000000002", metric=0.6, exec_seconds=20.0)]
    journal = Journal(nodes)
    journal.add(dataclasses.replace(
        ensemble_of(task, journal, {"000000000002": 1, "000000000001": 1}), metric=0.7))
    journal.add(make_node("000000000003", metric=0.8, exec_seconds=2.0))
    assert journal.best().node_id == "000000000003"  # type: ignore[union-attr]
    assert closing_seconds(journal, config(), folds, task, 1) == pytest.approx(
        SAVE_SHARE * (10.0 + 20.0) + SERVE_SECONDS)
    # without an ensemble, the best's own
    alone = Journal([*nodes, make_node("000000000003", metric=0.8, exec_seconds=2.0)])
    assert closing_seconds(alone, config(), folds, task, 1) == pytest.approx(
        SAVE_SHARE * 2.0 + SERVE_SECONDS)


def test_a_holdout_answer_keeps_back_its_refit_on_more_rows(task: PreparedTask) -> None:
    folds = make_folds(task, HOLDOUT)
    journal = Journal([make_node("n1", metric=0.5, exec_seconds=8.0)])
    rows = (len(task.train) + len(task.valid_y)) / len(task.train)
    assert rows > 1
    assert closing_seconds(journal, config(save_model=False), folds, task, 1) == pytest.approx(
        8.0 * rows)
    assert closing_seconds(journal, config(), folds, task, 1) == pytest.approx(
        SAVE_SHARE * 8.0 * rows + SERVE_SECONDS)


def test_an_engine_written_holdout_answer_is_refitted_at_its_own_share(
        task: PreparedTask) -> None:
    # make_model() code is saved by its one refit, no replay: REFIT_SHARE of its scaled scoring
    # seconds, for the reserve and for the rows it affords; a k-fold save keeps SAVE_SHARE.
    ctx = task_context(task, 0)
    code = assemble(ctx, model_code(ctx, "lgbm", {"n_estimators": 20}))
    node = dataclasses.replace(make_node("n1", metric=0.5, exec_seconds=8.0, code=code),
                               train_seconds=2.0)
    journal = Journal([node])
    holdout = make_folds(task, HOLDOUT)
    rows = (len(task.train) + len(task.valid_y)) / len(task.train)
    assert REFIT_SHARE < SAVE_SHARE
    assert closing_seconds(journal, config(), holdout, task, 1) == pytest.approx(
        REFIT_SHARE * 8.0 * rows + SERVE_SECONDS)
    assert closing_seconds(journal, config(), make_folds(task, 5), task, 1) == pytest.approx(
        SAVE_SHARE * 8.0 + SERVE_SECONDS)
    sampled = make_folds(task, HOLDOUT, rows=40)
    learned = len(sampled.learn_rows(0))
    assert refit_rows(task, journal, node, sampled, REFIT_SHARE * (8.0 + 2.0)) == 2 * learned


def test_a_sampled_holdout_keeps_back_its_refit_on_every_row(task: PreparedTask) -> None:
    folds = make_folds(task, HOLDOUT, rows=40)  # learns from 30 of the train rows
    journal = Journal([make_node("n1", metric=0.5, exec_seconds=8.0)])
    rows = (len(task.train) + len(task.valid_y)) / len(folds.learn_rows(0))
    assert rows > (len(task.train) + len(task.valid_y)) / len(task.train)
    assert closing_seconds(journal, config(save_model=False), folds, task, 1) == pytest.approx(
        8.0 * rows)


def test_a_sampled_answer_is_refitted_on_as_many_rows_as_the_time_left_affords(
        task: PreparedTask) -> None:
    folds = make_folds(task, HOLDOUT, rows=40)
    learned, dev = len(folds.learn_rows(0)), len(folds.fold_of)
    # 8 s a scoring run, 2 s of it fitting: each further `learned` rows cost 2 s more
    node = dataclasses.replace(make_node("n1", metric=0.5, exec_seconds=8.0), train_seconds=2.0)
    journal = Journal([node])
    assert refit_rows(task, journal, node, folds, SAVE_SHARE * (8.0 + 2.0)) == 2 * learned
    assert refit_rows(task, journal, node, folds, 1.0) == learned  # never fewer than it had
    assert refit_rows(task, journal, node, folds,  # every row fits
                      SAVE_SHARE * (8.0 + 2.0 * dev / learned)) is None
    assert refit_rows(task, journal, node, folds, None) is None
    # a search on every row refits on every row, whatever the time
    assert refit_rows(task, journal, node, make_folds(task, HOLDOUT), 1.0) is None
    # The refit predicts every test row, its scoring run the search's sample of them: 0.1 s a
    # row more for each it left out.
    untested = len(task.test_X) - len(folds.held_out)
    assert untested > 0
    slow = dataclasses.replace(node, predict_ms_per_row=100.0)
    assert refit_rows(task, Journal([slow]), slow, folds,
                      SAVE_SHARE * (8.0 + 2.0 + 0.1 * untested)) == 2 * learned


def test_a_feature_programs_gate_fits_are_no_part_of_its_refit(task: PreparedTask) -> None:
    # 38 s of scoring runs, 30 s of them fitting the gate's pairs: the refit and its reserve
    # are the 8 s node's (the refit fits the model alone).
    folds = make_folds(task, HOLDOUT, rows=40)
    learned = len(folds.learn_rows(0))
    rows = (len(task.train) + len(task.valid_y)) / learned
    node = dataclasses.replace(make_node("n1", metric=0.5, exec_seconds=38.0,
                                         operator=Operator.FEATURES),
                               train_seconds=2.0, gate_seconds=30.0)
    journal = Journal([node])
    assert refit_rows(task, journal, node, folds, SAVE_SHARE * (8.0 + 2.0)) == 2 * learned
    assert closing_seconds(journal, config(save_model=False), folds, task, 1) == pytest.approx(
        8.0 * rows)


def test_a_refit_on_part_of_the_rows_is_the_same_rows_for_a_replay(task: PreparedTask,
                                                                   tmp_path: Path) -> None:
    folds = make_folds(task, HOLDOUT, rows=40)
    (part,) = training_inputs(task, folds, 100)
    (again,) = training_inputs(task, folds, 100)
    (every,) = training_inputs(task, folds)
    assert part["train.csv"] == again["train.csv"]
    assert len(part["train.csv"].decode().splitlines()) == 1 + 100
    assert len(every["train.csv"].decode().splitlines()) == 1 + len(folds.fold_of)
    assert part["test.csv"] == every["test.csv"]
    (tmp_path / MODEL_DIR).mkdir()
    (tmp_path / MODEL_DIR / INFO_FILE).write_text('{"saved": true, "train_rows": 100}')
    assert saved_rows(tmp_path) == 100
    (tmp_path / MODEL_DIR / INFO_FILE).write_text('{"saved": true, "train_rows": null}')
    assert saved_rows(tmp_path) is None


def test_select_cv_keeps_back_the_cross_validation_of_the_top_nodes(task: PreparedTask) -> None:
    folds = make_folds(task, 5)
    nodes = [make_node(f"n{i}", metric=0.1 * i, exec_seconds=5.0 * i) for i in range(1, 6)]
    journal = Journal(nodes)
    cv = config(select="cv", save_model=False)
    # the top 3 (n5, n4, n3: 25 + 20 + 15 s over 5 folds, so 5, 4 and 3 s a fit), each
    # cross-validated in 5 folds: one executor runs all 15 fits, two take them in turn
    # (5+5+5+4+4+3+3+3 = 32 s for the first, 28 s for the other)
    assert closing_seconds(journal, cv, folds, task, 1) == pytest.approx(CV_FOLDS * 60.0 / 5)
    assert closing_seconds(journal, cv, folds, task, 2) == pytest.approx(32.0)
    assert closing_seconds(journal, config(select="cv"), folds, task, 2) == pytest.approx(
        32.0 + SAVE_SHARE * 25.0 * 3 / 5 + SERVE_SECONDS)


def test_a_slow_answer_never_takes_more_than_its_share(task: PreparedTask) -> None:
    journal = Journal([make_node("n1", metric=0.5, exec_seconds=10_000.0)])
    assert closing_seconds(journal, config(), make_folds(task, 5), task, 1) == pytest.approx(
        MAX_CLOSING_SHARE * 600.0)


def test_the_search_stops_the_reserve_before_the_budget() -> None:
    budget = Budget(100.0, started=time.monotonic() - 30.0)
    assert 69.0 < budget.left() <= 70.0
    budget.reserve = 25.0
    assert 44.0 < budget.left() <= 45.0
    budget.reserve = 80.0  # a better answer costs more to save than the search has left
    assert budget.left() < 0


def test_the_summary_says_what_the_closing_took(tmp_path: Path, task: PreparedTask) -> None:
    journal = Journal([make_node("n1", metric=0.5)])
    facts = summary_facts(journal, {}, {"seconds": 598.0, "budget": 600.0,
                                        "stopped_by": "wall clock", "closing_seconds": 41.4,
                                        "reserved_seconds": 45.0})
    text = write_summary(tmp_path, task, journal, {}, facts).read_text()
    assert ("- time: 598s of a 600s budget; stopped by wall clock; selecting and saving the "
            "answer took 41s of it (45s kept for that)") in text
    older = summary_facts(journal, {}, {"seconds": 598.0, "budget": 600.0})
    assert "selecting and saving" not in write_summary(tmp_path, task, journal, {},
                                                       older).read_text()


def test_a_round_goes_on_only_when_its_reserve_was_kept_to_fit_the_answer_again(
        task: PreparedTask, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from engine.loop import LoopStats
    from engine.records.store import RunStore
    from engine.search_run import SearchRun

    store = RunStore.create(tmp_path / "runs", task, {"config": {}})
    best = make_node("000000000001", metric=0.5)
    run = SimpleNamespace(config=config(), journal=Journal([best]), store=store)
    ended = LoopStats(stopped_by="wall clock")

    def may_resume(stats: LoopStats = ended, interrupted: bool = False,
                   reserve: float = 60.0, **changes: object) -> bool:
        here = SimpleNamespace(**{**vars(run), "config": config(**changes)})
        return SearchRun._may_resume(here, stats, interrupted, reserve)  # type: ignore[arg-type]

    assert may_resume()  # not kept: saving it fits it again
    assert not may_resume(reserve=10.0)  # too little to free
    assert not may_resume(interrupted=True) and not may_resume(LoopStats(stopped_by="user"))
    assert not may_resume(select="cv") and not may_resume(save_model=False)
    store.keep_fold_models(best.node_id, [b"m"] * 5)  # put together from kept models
    assert not may_resume()


@pytest.mark.slow  # a whole search of a minute, on Ray and the sandbox: the slow step
def test_a_search_goes_on_when_the_answers_measured_time_frees_its_reserve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The reserve is planted: 45 s while nothing is timed (an answer that would be fitted
    # again), 15 s once the round's time runs are in (one put together from kept models,
    # and served once: more than that takes, so the budget holds even under CI's load; a
    # planted 1 s let the closing run 7 s past it there). The search stops 45 s before the
    # budget, times its best, and goes on.
    from engine import search_run
    from engine.run import main

    timings_seen: list[Timings | None] = []

    def planted(*args: object, **kwargs: object) -> float:
        timings = args[6] if len(args) > 6 else None
        timings_seen.append(timings)  # type: ignore[arg-type]
        return 45.0 if timings is None else 15.0

    monkeypatch.setattr(search_run, "closing_seconds", planted)
    # as if the best's fold models were too big to keep: saving it would fit it again
    monkeypatch.setattr(search_run, "kept_compose_runs", lambda node, kept: None)
    make_data(tmp_path / "d.csv", rows=240)
    assert main(["--data", str(tmp_path / "d.csv"), "--target", "y", "--llm", "none",
                 "--budget", "90s", "--executors", "2", "--memory", "off",
                 "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    manifest = json.loads((run / "manifest.json").read_text())
    spent, started = manifest["spent"], manifest["starts"][0]["at"]
    assert any(t is not None and t.models_ms for t in timings_seen)  # the best was timed
    assert spent["resumed_seconds"] > RESUME_SECONDS and spent["reserved_seconds"] == 15.0
    assert spent["seconds"] <= 90.0 * 1.1
    finished = pd.read_parquet(run / "nodes")
    # nodes finished after the first round ended (45 s before the budget)
    assert (finished[finished.status == "ok"].finished_at > started + 50.0).any()
    assert "the search went on" in (run / "summary.md").read_text()


@pytest.mark.slow  # a whole search
def test_a_search_on_a_sample_predicts_a_sample_of_the_test_rows_and_its_answer_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A small table searched on a sample, as a large one is: at most 300 of its dev rows.
    monkeypatch.setattr(folds_module, "MIN_SEARCH_ROWS", 300)
    monkeypatch.setattr(folds_module, "SEARCH_CELLS_PER_EXECUTOR_SECOND", 1)
    make_data(tmp_path / "d.csv", rows=3000)
    assert run_main(["--data", str(tmp_path / "d.csv"), "--target", "y", "--llm", "none",
                     "--folds", "1", "--max-nodes", "4", "--budget", "2m", "--executors", "1",
                     "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    opened = open_run(run)
    task, folds, node = opened.task(), opened.store.load_folds(), opened.journal.final()
    assert folds is not None and folds.sampled and len(folds.held_out) < len(task.test_X)
    assert node is not None
    kept = opened.store.read_predictions(node.node_id, "test")
    assert kept is not None and len(pd.read_csv(io.BytesIO(kept))) == len(folds.held_out)
    answer = (run / "best" / "submission" / "test.csv").read_bytes()
    assert len(pd.read_csv(io.BytesIO(answer))) == len(task.test_X)
    summary = (run / "summary.md").read_text()
    assert (f"its nodes' test scores on {len(folds.held_out)} of {len(task.test_X)} test rows"
            in summary)
    assert "train + valid rows, what the budget afforded;" in summary or (
        "(refitted on train + valid;" in summary)
