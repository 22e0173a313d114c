"""The answer's warm one-row latency and the limit the final selection keeps it under (issue
77, item 5; engine/evaluation/latency.py): the limit's logic on planted timings (a node over it
gives way to the next best that fits, an ensemble with a slow member included; nothing fits:
the fastest), its record in words, and the real time run (operators/fitted.py TIME) on kept
fold models and on a composed ensemble in the sandbox. No timing is asserted beyond being
measured: speed goals live in benchmarks/."""

from __future__ import annotations

import dataclasses

import pytest

from engine.deploy.saved_model import compose_answer
from engine.evaluation.folds import make_folds
from engine.evaluation.latency import (
    Timings,
    fastest,
    measured_within,
    over_limit,
    read_timings,
    time_models,
    within_limit,
)
from engine.evaluation.select import one_at_a_time
from engine.evaluation.selection import Comparison, Latency, Selection
from engine.search_run import task_context
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.fitted import LATENCY_MARK
from operators.kinds.ensemble import ensemble_code
from sandbox import run_script
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


def test_when_nothing_fits_the_fastest_is_taken() -> None:
    journal, members = tree()
    slow = Timings(1.0, {"base": 40.0, "a": 25.0, "b": 30.0, "c": 22.0})
    among, fastest_id = within_limit(journal, "e1", members, slow, LIMIT)
    assert among.best() is None and fastest_id == "c"
    assert fastest(journal.eligible_nodes, members, slow) == "c"


def test_the_record_says_the_one_row_latency_and_what_the_limit_changed() -> None:
    latency = Latency(LIMIT, 8.0, 1.0, (("a", 3.0), ("c", 4.0)), held_back=(("e1", 34.0),))
    assert latency.text() == "one row 8.0 ms p50 warm (request 1.0 + models a 3.0, c 4.0 ms)"
    selection = Selection("valid", "best valid score", "e2", "ensemble",
                          Comparison("e2", "e1"), latency=latency)
    assert selection.reason().startswith("held back by the 20 ms one-row limit: e1 (34 ms); ")
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
