"""Greedy (AIDE) policy semantics, with proposals in flight."""

from __future__ import annotations

import dataclasses

from search.greedy import GreedyPolicy
from search.journal import Journal
from search.node import Operator, Status
from search.programs import REJECTED, Gate
from tests.helpers import make_node


def test_drafts_first_counting_in_flight() -> None:
    policy = GreedyPolicy(seed=0, num_drafts=3)
    proposals = policy.propose(Journal(), 5, {(Operator.DRAFT, None): 1})
    ops = [p.operator for p in proposals]
    # No good node and nothing to debug: it waits for its drafts rather than guess more.
    assert ops == [Operator.DRAFT, Operator.DRAFT]
    # Parallel drafts get different model families.
    assert len({p.hint for p in proposals[:2]}) == 2


def test_drafts_again_only_with_nothing_in_flight() -> None:
    buggy = Journal([make_node("a", status=Status.BUGGY, code="")])  # nothing to debug
    policy = GreedyPolicy(seed=0, num_drafts=1)
    assert [p.operator for p in policy.propose(buggy, 3, {})] == [Operator.DRAFT]
    assert policy.propose(buggy, 3, {(Operator.DRAFT, None): 1}) == []
    assert [p.operator for p in policy.propose(buggy, 1, {(Operator.TUNE, None): 1})] == [
        Operator.DRAFT]  # the floor's work gives greedy nothing to debug or improve


def test_improves_best_after_drafts() -> None:
    j = Journal([make_node("a", metric=1.0), make_node("b", metric=2.0, step=1),
                 make_node("c", metric=0.5, step=2)])
    proposals = GreedyPolicy(seed=1, num_drafts=3, debug_prob=0.0).propose(j, 3, {})
    assert all(p.operator is Operator.IMPROVE and p.parent_id == "b" for p in proposals)
    assert len({p.hint for p in proposals}) == 3  # siblings are asked for different changes


def test_debug_never_hands_same_leaf_twice() -> None:
    j = Journal([make_node("a", status=Status.BUGGY), make_node("b", status=Status.BUGGY, step=1),
                 make_node("c", metric=1.0, step=2)])
    policy = GreedyPolicy(seed=0, num_drafts=3, debug_prob=1.0)
    proposals = policy.propose(j, 4, {})
    debug_parents = [p.parent_id for p in proposals if p.operator is Operator.DEBUG]
    assert sorted(debug_parents) == ["a", "b"]
    assert proposals[2].operator is Operator.IMPROVE  # leaves used up: improve the best


def test_max_debug_depth_and_temperature_rise() -> None:
    nodes = [make_node("a", status=Status.BUGGY)]
    for i, parent in enumerate(["a", "d1", "d2"]):
        nodes.append(make_node(f"d{i + 1}", parent, operator=Operator.DEBUG,
                               status=Status.BUGGY, step=i + 1))
    j = Journal([*nodes, make_node("x", step=9), make_node("y", step=10)])
    policy = GreedyPolicy(seed=0, num_drafts=3, debug_prob=1.0, max_debug_depth=3)
    assert policy.propose(j, 1, {})[0].operator is Operator.IMPROVE  # d3 is at depth 3
    shallow = Journal([*nodes[:3], make_node("x", step=9), make_node("y", step=10)])
    prop = policy.propose(shallow, 1, {})[0]
    assert prop.operator is Operator.DEBUG and prop.parent_id == "d2"
    assert prop.temperature > policy.base_temperature


def test_deterministic_under_seed() -> None:
    j = Journal([make_node("a", status=Status.BUGGY), make_node("b", status=Status.BUGGY, step=1),
                 make_node("c", metric=1.0, step=2), make_node("d", status=Status.BUGGY, step=3)])
    runs = [[(p.operator, p.parent_id) for p in GreedyPolicy(seed=7).propose(j, 6, {})]
            for _ in range(2)]
    assert runs[0] == runs[1]


def test_writing_features_extends_the_best_kept_set_and_both_takes_turns() -> None:
    base = make_node("base", operator=Operator.BASELINE, metric=0.5)
    features = GreedyPolicy(seed=0, writes="features")
    # Nothing scored: no configuration to pair a program with, so it waits for the floor.
    assert features.propose(Journal([]), 2, {}) == []
    journal = Journal([base])
    one, two = features.propose(journal, 2, {})
    assert one.operator is two.operator is Operator.FEATURES
    assert (one.parent_id, one.idea, one.family) == (None, "base", "lgbm")
    kept = dataclasses.replace(
        make_node("kept", operator=Operator.FEATURES, metric=0.7, step=1), feature_set="kept",
        hint='{"name": "base", "family": "lgbm", "params": {}}',
        gate=Gate("base", (0.1,) * 5, True, "kept").to_json())
    (three,) = features.propose(Journal([base, kept]), 1, {})
    assert (three.parent_id, three.idea) == ("kept", "kept")
    # A program refused on its text: the next one is sampled wider.
    refused = dataclasses.replace(
        make_node("refused", operator=Operator.FEATURES, status=Status.BUGGY, step=2),
        error=f"{REJECTED} it reads the target")
    (four,) = features.propose(Journal([base, kept, refused]), 1, {})
    assert three.temperature == features.base_temperature < four.temperature
    # Both: a program, then a whole-script step, in turn (in flight counted).
    both = GreedyPolicy(seed=0, writes="both", num_drafts=1)
    first, second = both.propose(journal, 2, {})
    assert (first.operator, second.operator) == (Operator.FEATURES, Operator.DRAFT)
