"""The answer's warm one-row latency and the limit the final selection keeps it under (issue
77, item 5; engine/evaluation/latency.py): the limit's logic on planted timings (a node over it
gives way to the next best that fits, an ensemble with a slow member included; nothing fits:
the fastest), its record in words, and the real time run (operators/fitted.py TIME) on kept
fold models and on a composed ensemble in the sandbox. No timing is asserted beyond being
measured: speed goals live in benchmarks/."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from engine.config import RunConfig
from engine.deploy.saved_model import answer_members, compose_answer
from engine.evaluation.blend import ensemble_selection
from engine.evaluation.final import limit_timings, select_final, serving_timings
from engine.evaluation.folds import dev_labels, make_folds
from engine.evaluation.latency import (
    Timings,
    fastest,
    measured_within,
    over_limit,
    read_timings,
    time_models,
    within_limit,
)
from engine.evaluation.scoring import HeldOut, submission_metric
from engine.evaluation.select import one_at_a_time
from engine.evaluation.selection import Comparison, Latency, Selection
from engine.records.recorder import NodeRecorder
from engine.records.store import RunStore
from engine.search_run import task_context
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.fitted import LATENCY_MARK
from operators.harness import assemble
from operators.kinds.ensemble import ensemble_code, ensemble_written
from operators.models import model_code
from sandbox import ExecResult, Limits, run_script
from search.journal import Journal
from search.node import Node, Operator
from tests.helpers import make_data, make_node
from tests.test_fitted import LIMITS
from tests.test_kept_models import kept_members

LIMIT = 20.0


def node(node_id: str, metric: float, operator: Operator = Operator.PORTFOLIO,
         step: int = 1) -> Node:
    return make_node(node_id, None if operator is Operator.BASELINE else "base",
                     operator=operator, metric=metric, step=step)


def tree() -> tuple[Journal, dict[str, list[str]]]:
    """A baseline root, four portfolio nodes (d never timed: its fold models were not kept)
    and two ensembles (best first: e1 of a and the slow b, then e2 of a and c), with each
    node's members."""
    nodes = [node("base", 0.5, Operator.BASELINE, 0), node("a", 0.7), node("b", 0.75),
             node("c", 0.72), node("d", 0.88), node("e1", 0.9, Operator.ENSEMBLE, 2),
             node("e2", 0.85, Operator.ENSEMBLE, 3)]
    members = {"e1": ["a", "b"], "e2": ["a", "c"]}
    return Journal(nodes), {n.node_id: members.get(n.node_id, [n.node_id]) for n in nodes}


PLANTED = Timings(request_ms=1.0, models_ms={"base": 2.0, "a": 3.0, "b": 30.0, "c": 4.0})


def read_back(latency: Latency) -> Latency | None:
    """`latency` as a run's record stores it and reads it again."""
    again = Selection.read({"selection": Selection(
        "valid", "best valid score", "e2", "ensemble", Comparison("e2", "e1"),
        latency=latency).to_json()})
    return None if again is None else again.latency


def test_an_answer_is_a_request_and_every_members_models() -> None:
    assert PLANTED.answer_ms(["a", "c"]) == 1.0 + 3.0 + 4.0
    assert PLANTED.answer_ms(["a", "unmeasured"]) is None
    assert PLANTED.answer_ms([]) is None


def test_an_ensemble_with_a_slow_member_gives_way_to_the_next_best_that_fits() -> None:
    journal, members = tree()
    assert over_limit(journal.eligible_nodes, members, PLANTED, LIMIT) == {"b": 31.0, "e1": 34.0}
    among, fastest_id = within_limit(journal, "e1", members, PLANTED, LIMIT)
    assert fastest_id is None
    # e2, not d: d's latency is not known to fit
    assert among.best() is not None and among.best().node_id == "e2"
    assert not among.is_eligible(journal.get("b")) and among.is_eligible(journal.get("a"))
    assert not among.is_eligible(journal.get("d"))
    assert journal.best() is not None and journal.best().node_id == "e1"  # the run's own: as it was
    # A choice that fits, or that was never measured, stands.
    assert within_limit(journal, "e2", members, PLANTED, LIMIT) == (journal, None)
    assert within_limit(journal, "d", members, PLANTED, LIMIT) == (journal, None)
    # d, timed only once saved and over the limit, gives way the same way
    fits = measured_within(journal, members, PLANTED, LIMIT)
    assert fits.best() is not None and fits.best().node_id == "e2"
    unmeasured = dataclasses.replace(PLANTED, models_ms={"a": 3.0})
    assert within_limit(journal, "e1", members, unmeasured, LIMIT) == (journal, None)


def test_an_ensemble_whose_measured_members_are_over_the_limit_is_held_back_unfitted() -> None:
    journal, members = tree()
    members["e1"] = ["b", "d"]  # d's fold models were not kept: d is not measured
    assert PLANTED.answer_ms(["b", "d"]) is None
    assert PLANTED.known_ms(["b", "d"]) == 1.0 + 30.0 and PLANTED.known_ms(["d"]) is None
    assert over_limit(journal.eligible_nodes, members, PLANTED, LIMIT)["e1"] == 31.0
    among, fastest_id = within_limit(journal, "e1", members, PLANTED, LIMIT)
    assert fastest_id is None and among.best() is not None and among.best().node_id == "e2"
    # one whose measured part fits stands: it is timed once saved
    members["e1"] = ["a", "d"]
    assert within_limit(journal, "e1", members, PLANTED, LIMIT) == (journal, None)
    latency = Latency(LIMIT, 8.0, 1.0, (("a", 3.0), ("c", 4.0)), held_back=(("e1", 31.0),),
                      held_back_members=(("c", 4.0), ("b", 30.0)), held_back_unmeasured=("d",))
    assert latency.change() == ("held back by the 20 ms one-row limit: e1 (at least 31 ms: "
                                "b 30.0, c 4.0; not measured: d)")
    one_measured = dataclasses.replace(latency, held_back_members=(("b", 30.0),))
    assert one_measured.change() == ("held back by the 20 ms one-row limit: e1 (at least 31 "
                                     "ms: b 30.0; not measured: d)")
    assert read_back(latency) == latency


def test_a_served_answer_over_the_limit_counts_what_serving_added() -> None:
    # a and c timed at 1 + 3 + 4 = 8 ms, served at 22: a request costs 14 ms more
    serving = serving_timings(PLANTED, ["a", "c"], 22.0)
    assert serving is not None and serving.request_ms == 15.0
    assert serving.models_ms == PLANTED.models_ms
    assert serving_timings(PLANTED, ["a", "d"], 22.0) is None  # d was not timed
    assert serving_timings(PLANTED, ["a"], None) is None
    faster = serving_timings(PLANTED, ["a"], 2.0)  # served faster than timed: no discount
    assert faster is not None and faster.request_ms == 1.0
    latency = Latency(LIMIT, 8.0, 1.0, (("a", 3.0), ("c", 4.0)), served_ms=17.0,
                      served_over=(("e1", 22.0),))
    assert latency.change() == ("held back by the 20 ms one-row limit: served, e1 took 22 ms, "
                                "so the rule chose again with a request costing what serving "
                                "added")
    assert latency.text() == ("one row 8.0 ms p50 warm (request 1.0 + models a 3.0, c 4.0 ms)"
                              "; served, 17.0 ms p50")
    assert read_back(latency) == latency


def test_when_nothing_fits_the_fastest_is_taken() -> None:
    journal, members = tree()
    slow = Timings(1.0, {"base": 40.0, "a": 25.0, "b": 30.0, "c": 22.0})
    among, fastest_id = within_limit(journal, "e1", members, slow, LIMIT)
    assert among.best() is None and fastest_id == "c"
    assert fastest(journal.eligible_nodes, members, slow) == "c"


def test_the_record_says_the_one_row_latency_and_what_the_limit_changed() -> None:
    latency = Latency(LIMIT, 8.0, 1.0, (("a", 3.0), ("c", 4.0)), held_back=(("e1", 34.0),),
                      held_back_members=(("a", 3.0), ("b", 30.0)))
    assert latency.text() == "one row 8.0 ms p50 warm (request 1.0 + models a 3.0, c 4.0 ms)"
    selection = Selection("valid", "best valid score", "e2", "ensemble",
                          Comparison("e2", "e1"), latency=latency)
    # what made the held-back ensemble slow, its slowest member first
    assert selection.reason().startswith(
        "held back by the 20 ms one-row limit: e1 (34 ms: b 30.0, a 3.0); ")
    alone = dataclasses.replace(latency, held_back_members=(("e1", 33.0),))
    assert alone.change() == "held back by the 20 ms one-row limit: e1 (34 ms)"
    again = Selection.read({"selection": selection.to_json()})
    assert again is not None and again.latency == latency
    assert "fastest is taken" in dataclasses.replace(latency, none_fit=True).change()
    assert "over the 20 ms limit" in dataclasses.replace(latency, answer_ms=25.0).text()
    assert Latency(LIMIT).text() == "one row: not measured (limit 20 ms)"


def test_a_time_runs_line_is_read_by_the_groups_names() -> None:
    line = LATENCY_MARK + '{"request_ms": 1.5, "groups": [{"ms": 2}, {"ms": 9, "members": [4, 5]}]}'
    timings = read_timings(f"some output\n{line}\n", ["x", "y"])
    assert timings == Timings(1.5, {"x": 2.0, "y": 9.0}, {"y": (4.0, 5.0)})
    assert read_timings(line, ["x"]) is None  # not one group per name
    assert read_timings("no line", ["x"]) is None


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    tmp = tmp_path_factory.mktemp("latency")
    make_data(tmp / "d.csv", rows=200)
    return prepare_task(TaskSpec(data=tmp / "d.csv", target="y"))


def test_kept_fold_models_and_a_composed_ensemble_are_timed_in_the_sandbox(
        task: PreparedTask) -> None:
    ctx = task_context(task, 0)
    codes, states, tests = kept_members(task, make_folds(task, 3), (
        ("lgbm", {"n_estimators": 20}),
        ("random_forest", {"n_estimators": 20, "max_features": 0.5, "min_samples_leaf": 2})))
    run = run_script
    timings = time_models(task, codes[0], {"lgbm": states[0], "forest": states[1]}, run,
                          LIMITS)
    assert timings is not None, "the time run measured nothing"
    assert set(timings.models_ms) == {"lgbm", "forest"} and timings.members_ms == {}
    assert timings.request_ms > 0 and all(ms > 0 for ms in timings.models_ms.values())
    # An ensemble's saved models: its members are timed one by one too.
    code = ensemble_code(ctx, codes, [2, 1])
    composed = compose_answer(task, "e", code, states, tests, one_at_a_time(run_script), LIMITS)
    assert composed is not None
    timed = time_models(task, code, {"e": composed.states}, run, LIMITS)
    assert timed is not None and len(timed.members_ms["e"]) == 2
    assert all(ms > 0 for ms in timed.members_ms["e"])


def test_a_held_back_ensemble_gives_way_to_one_made_within_the_limit(
        task: PreparedTask, tmp_path: Path) -> None:
    # `up` and `down` cancel, and `down` is slow: the search's ensemble of them is over the
    # limit; `flat` cancels `up` less well but fits beside it. The selection makes and chooses
    # the ensemble of up and flat, stores it as a node, and says what held the first back.
    up, down, flat = "0000000000a1", "0000000000b2", "0000000000c3"  # ids a plan names
    ctx = task_context(task, 0)
    truth = dev_labels(task).iloc[make_folds(task, 1).held_out].reset_index(drop=True)
    noise = np.random.default_rng(0).normal(0, 0.2, len(truth))
    frames = {"base": truth * 0 + truth.mean(), up: truth + 1.0 + noise,
              down: truth - 1.0 - noise, flat: truth - 1.0}
    code = assemble(ctx, model_code(ctx, "lgbm", {"n_estimators": 5}))
    nodes = [node("base", 0.0, Operator.BASELINE, 0)] + [
        dataclasses.replace(node(i, 0.0, step=s), code=code + f"# {i}\n")
        for s, i in enumerate((up, down, flat), start=1)]
    held = {n.node_id: HeldOut(pd.DataFrame({"prediction": frames[n.node_id]}),
                               task.test_X[[]].assign(prediction=0.0).reset_index(drop=True),
                               0.0, 0.0) for n in nodes}
    weights, both = ensemble_selection(task, {i: held[i] for i in (up, down)}, truth)
    assert both is not None and set(weights) == {up, down}
    members = [n for n in nodes if n.node_id in weights]
    blended = make_node("e1", up, operator=Operator.ENSEMBLE, step=4)
    written = ensemble_written(ctx, members, weights, 2)
    blended = dataclasses.replace(blended, plan=written.plan, code=written.code)
    store = RunStore.create(tmp_path / "runs", task, {"config": {}})  # no folds: the holdout
    journal = Journal()
    recorder = NodeRecorder(store, task, journal)
    for n in nodes:
        n = dataclasses.replace(n, metric=-submission_metric(task, held[n.node_id].valid, truth),
                                metric_raw=submission_metric(task, held[n.node_id].valid, truth))
        recorder.record(n, 0.0, held[n.node_id], None)
        store.keep_fold_models(n.node_id, [n.node_id.encode()])
    recorder.record(dataclasses.replace(blended, metric=-both.valid_raw,
                                        metric_raw=both.valid_raw), 0.0, both, None)
    assert journal.best() is not None and journal.best().node_id == "e1"
    planted = {"base": 25.0, up: 3.0, down: 30.0, flat: 4.0}

    def run(script: str, inputs: dict[str, bytes], limits: Limits) -> ExecResult:
        if "'time'" not in script:  # composing the answer: not saved, as a failed run
            return ExecResult("error", 1, "", "", 0.0, None, None, "no", "rlimits")
        groups = sorted(name for name in inputs if name.endswith("-0.pkl"))
        ms = [{"ms": planted[inputs[f"kept-{g}-0.pkl"].decode()]} for g in range(len(groups))]
        line = LATENCY_MARK + json.dumps({"request_ms": 1.0, "groups": ms})
        return ExecResult("ok", 0, line, "", 0.0, None, None, "", "rlimits")

    tests: dict[str, float | None] = {}
    record = select_final(store, task, journal, tests, RunConfig(select="valid"),
                          Console(quiet=True), run, one_at_a_time(run), ctx=ctx)
    made = journal.get(record.node_id or "")
    assert made.operator is Operator.ENSEMBLE and set(answer_members(made)) == {up, flat}
    assert "within the 20 ms one-row limit" in made.plan and made.node_id in tests
    assert (made.metric or 0.0) > max(journal.get(i).metric or 0.0 for i in (up, flat))
    assert store.read_predictions(made.node_id, "valid") is not None
    assert any(row["node_id"] == made.node_id for row in store.read_rows())
    assert record.latency is not None and record.latency.held_back == (("e1", 34.0),)
    assert record.latency.answer_ms == pytest.approx(8.0)
    assert record.latency.change().startswith(
        f"held back by the 20 ms one-row limit: e1 (34 ms: {down} 30.0, {up} 3.0)")
    # Served, the made ensemble takes 22 ms, 14 more than its 8 timed. Under the default
    # limit that is recorded, and the answer stands.
    journal = Journal([n for n in journal if n.node_id != made.node_id])
    record = select_final(store, task, journal, {}, RunConfig(select="valid"),
                          Console(quiet=True), run, one_at_a_time(run), ctx=ctx,
                          serve=lambda: 22.0)
    assert record.latency is not None and record.latency.served_over == ()
    assert record.latency.text().endswith("; served, 22.0 ms p50, over the 20 ms limit")
    journal = Journal([n for n in journal if n.node_id != record.node_id])
    # A stated limit holds as served: with a request that costly only one of up and flat
    # fits, and the rule chooses between them; it is served again and recorded with what
    # held the first back.
    stated = RunConfig(select="valid", max_predict_ms_per_row=20.0)
    served = [22.0, 17.0]
    record = select_final(store, task, journal, {}, stated,
                          Console(quiet=True), run, one_at_a_time(run), ctx=ctx,
                          serve=lambda: served.pop(0))
    assert record.node_id in {up, flat} and served == []
    assert record.latency is not None and record.latency.served_ms == 17.0
    ((first_served, first_ms),) = record.latency.served_over
    assert journal.get(first_served).operator is Operator.ENSEMBLE and first_ms == 22.0
    assert f"served, {first_served} took 22 ms" in record.latency.change()
    assert record.latency.text().endswith("; served, 17.0 ms p50")
    # Served within the limit, the answer stands.
    journal = Journal([n for n in journal if n.node_id != first_served])
    kept = select_final(store, task, journal, {}, stated,
                        Console(quiet=True), run, one_at_a_time(run), ctx=ctx,
                        serve=lambda: 19.0)
    assert kept.latency is not None and kept.latency.served_over == ()
    assert set(answer_members(journal.get(kept.node_id or ""))) == {up, flat}
    # Served so slowly that no model fits beside what serving adds: the answer stands, and the
    # record says it serves over the limit.
    journal = Journal([n for n in journal if n.node_id != kept.node_id])
    stands = select_final(store, task, journal, {}, stated,
                          Console(quiet=True), run, one_at_a_time(run), ctx=ctx,
                          serve=lambda: 60.0)
    assert stands.latency is not None and stands.latency.served_over == ()
    assert stands.latency.text().endswith("; served, 60.0 ms p50, over the 20 ms limit")
    assert set(answer_members(journal.get(stands.node_id or ""))) == {up, flat}
    # Without the search's context nothing is made: the next best that fits, as before; and
    # nothing when no two fit together (3 + 17 ms beside a request's 1 is over 20).
    journal = Journal([n for n in journal if n.node_id != stands.node_id])
    again = select_final(store, task, journal, {}, RunConfig(select="valid"),
                         Console(quiet=True), run, one_at_a_time(run))
    assert again.node_id in {up, flat}
    planted[flat] = 17.0
    journal = Journal([n for n in journal if n.node_id != made.node_id])
    alone = select_final(store, task, journal, {}, RunConfig(select="valid"),
                         Console(quiet=True), run, one_at_a_time(run), ctx=ctx)
    assert alone.node_id in {up, flat} and len(journal) == 5


def test_a_time_run_made_when_a_search_round_ended_is_not_made_again(
        task: PreparedTask, tmp_path: Path) -> None:
    # The search times its best when a round ends (to know what the answer's work will
    # take); the final selection begins with those timings and times only what is new.
    store = RunStore.create(tmp_path / "runs", task, {"config": {}})
    journal, members = tree()
    for node_id in PLANTED.models_ms:
        store.keep_fold_models(node_id, [node_id.encode()])
    timed: list[set[str]] = []

    def run(script: str, inputs: dict[str, bytes], limits: Limits) -> ExecResult:
        names = [inputs[f"kept-{g}-0.pkl"].decode()
                 for g in range(sum(name.endswith("-0.pkl") for name in inputs))]
        timed.append(set(names))
        line = LATENCY_MARK + json.dumps({"request_ms": 1.0, "groups": [
            {"ms": PLANTED.models_ms[n]} for n in names]})
        return ExecResult("ok", 0, line, "", 0.0, None, None, "", "rlimits")

    # e1's members first; b is over the limit, so every kept node, those not timed yet
    first = limit_timings(store, task, journal, "e1", members, run, LIMITS, LIMIT)
    assert timed == [{"a", "b"}, {"base", "c"}]
    assert first is not None and first.models_ms == PLANTED.models_ms
    assert limit_timings(store, task, journal, "e1", members, run, LIMITS, LIMIT,
                         first) == first
    assert len(timed) == 2
    # a node kept after the round is timed alone, against the same request
    journal.add(node("f", 0.95))
    members["f"] = ["f"]
    store.keep_fold_models("f", [b"c"])  # planted: times as c does
    later = limit_timings(store, task, journal, "f", members, run, LIMITS, LIMIT, first)
    assert timed[2:] == [{"c"}] and later is not None
    assert later.models_ms == {**PLANTED.models_ms, "f": 4.0} and later.request_ms == 1.0
