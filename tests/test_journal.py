"""Journal: derived facts from id-linked frozen nodes."""

from __future__ import annotations

import pytest

from search.journal import Journal, best_of
from search.node import Node, Operator, Status
from tests.helpers import make_node


def test_tree_facts() -> None:
    j = Journal()
    j.add(make_node("a", metric=1.0, step=0))
    j.add(make_node("b", "a", metric=3.0, step=1))
    j.add(make_node("c", "a", status=Status.BUGGY, step=2))
    j.add(make_node("d", "c", operator=Operator.DEBUG, status=Status.BUGGY, step=3))
    j.add(make_node("e", None, status=Status.TIMEOUT, step=4))
    assert [n.node_id for n in j.children("a")] == ["b", "c"]
    assert [n.node_id for n in j.draft_nodes] == ["a", "e"]
    assert j.best() is not None and j.best().node_id == "b"  # type: ignore[union-attr]
    assert {n.node_id for n in j.buggy_leaves} == {"d", "e"}
    assert j.debug_depth("d") == 1 and j.debug_depth("b") == 0
    assert [n.node_id for n in j.ancestors("d")] == ["a", "c", "d"]
    assert j.status_counts()["buggy"] == 2 and j.status_counts()["timeout"] == 1
    assert j.find_code("b") == "b" and j.find_code("zzz") is None


def test_a_node_beats_the_baseline_root_that_ran() -> None:
    j = Journal()
    j.add(make_node("x", status=Status.BUGGY, operator=Operator.BASELINE))
    j.add(make_node("a", metric=2.0))
    assert j.baseline() is None and not j.beats_baseline(j.get("a"))  # no baseline ran
    j.add(make_node("base", metric=1.0, operator=Operator.BASELINE))
    j.add(make_node("b", "a", metric=0.5))
    j.add(make_node("c", "a", status=Status.BUGGY))
    assert j.baseline() is j.get("base")
    assert [n.node_id for n in j if j.beats_baseline(n)] == ["a"]


def test_best_tie_keeps_earlier_node() -> None:
    j = Journal([make_node("a", metric=2.0, step=0), make_node("b", metric=2.0, step=1)])
    assert j.best().node_id == "a"  # type: ignore[union-attr]


def test_best_ignores_failed_nodes() -> None:
    j = Journal([make_node("a", status=Status.BUGGY), make_node("b", status=Status.OOM)])
    assert j.best() is None


def test_unknown_parent_and_duplicate_id_are_rejected() -> None:
    j = Journal([make_node("a")])
    with pytest.raises(ValueError):
        j.add(make_node("a"))
    with pytest.raises(ValueError):
        j.add(make_node("x", "missing"))


def test_not_run_nodes_are_not_debug_candidates() -> None:
    j = Journal([make_node("a", status=Status.BUGGY, code="", exec_seconds=0.0)])
    assert j.buggy_leaves == []


def test_record_round_trip() -> None:
    node = make_node("a", metric=0.5)
    assert Node.from_record(node.to_record()) == node


def test_best_of_ranks_any_nodes_as_the_journal_does() -> None:
    # a score of 0 counts (normalised RMSE is negative), a tie goes to the earlier step, and
    # a node without a score is never the best
    nodes = [make_node("a", metric=-0.3, step=0), make_node("b", metric=0.0, step=2),
             make_node("c", metric=0.0, step=1), make_node("d", metric=None, step=3)]
    best = best_of(nodes)
    assert best is not None and best.node_id == "c"
    assert best_of(n for n in nodes if n.metric is None) is None
    assert best_of([]) is None
