"""MCTS policy semantics: UCT values, virtual loss, progressive widening, debug budget."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from benchmarks.spread import simulate_spread
from search.journal import Journal
from search.mcts import MCTSPolicy, rank_rewards, uct
from search.node import Node, Operator, Status
from search.policy import InFlightKey
from search.programs import Gate
from tests.helpers import make_node


def test_rank_rewards_in_unit_interval_with_shared_ties() -> None:
    assert rank_rewards([0.3, 10.0, 0.1, 0.3]) == [0.625, 1.0, 0.25, 0.625]
    assert rank_rewards([]) == []
    assert rank_rewards([5.0]) == [1.0]


def test_uct_prefers_higher_reward_at_equal_visits_and_fewer_visits_at_equal_reward() -> None:
    assert uct(3.0, 4, 10, 1.0) > uct(2.0, 4, 10, 1.0)
    assert uct(1.0, 2, 10, 1.0) > uct(2.0, 4, 10, 1.0)
    # Exploration dominates: a worse but rarely tried child wins.
    assert uct(0.1, 1, 10, 5.0) > uct(3.6, 4, 10, 5.0)
    assert uct(0.1, 1, 10, 0.01) < uct(3.6, 4, 10, 0.01)


def _two_subtrees() -> Journal:
    # Ranks among the 6 ok nodes: a 1, a1 2, b2 3, b1 4, b3 5, b 6 (sixths).
    return Journal([
        make_node("a", metric=0.1), make_node("b", metric=0.9, step=1),
        make_node("a1", "a", metric=0.2, step=2), make_node("b1", "b", metric=0.8, step=3),
        make_node("b2", "b", metric=0.7, step=4), make_node("b3", "b", metric=0.85, step=5),
    ])


def _descent(exploration: float) -> str | None:
    # widening_k=0.5 closes the root (2 drafts, 6 visits) and both drafts, so the first
    # proposal shows which way UCT descended: it improves a leaf of the chosen subtree.
    policy = MCTSPolicy(seed=0, num_drafts=2, exploration=exploration, widening_k=0.5)
    return policy.propose(_two_subtrees(), 1, {})[0].parent_id


def test_uct_descends_into_the_better_subtree_when_exploiting() -> None:
    # Q(a) = (1+2)/6/2 = 0.25 over 2 visits, Q(b) = (6+4+3+5)/6/4 = 0.75 over 4; then b3 is
    # b's best leaf (5/6 against 4/6 and 3/6, one visit each).
    assert _descent(exploration=0.01) == "b3"


def test_uct_descends_into_the_less_visited_subtree_when_exploring() -> None:
    assert _descent(exploration=10.0) == "a1"


def test_equal_visits_higher_reward_wins() -> None:
    journal = Journal([make_node("lo", metric=0.2), make_node("hi", metric=0.4, step=1)])
    for seed in range(5):
        policy = MCTSPolicy(seed=seed, num_drafts=2, widening_k=0.5)
        first = policy.propose(journal, 1, {})[0]
        assert (first.operator, first.parent_id) == (Operator.IMPROVE, "hi")


def _four_good() -> Journal:
    return Journal([make_node(f"g{i}", metric=0.80 + 0.001 * i, step=i) for i in range(4)])


def test_virtual_loss_spreads_eight_proposals() -> None:
    for seed in range(5):
        proposals = MCTSPolicy(seed=seed).propose(_four_good(), 8, {})
        assert len({p.parent_id for p in proposals}) >= 3


def test_virtual_loss_spreads_proposals_handed_out_one_at_a_time() -> None:
    journal = _four_good()
    policy = MCTSPolicy(seed=0)
    in_flight: Counter[InFlightKey] = Counter()
    for _ in range(8):
        (proposal,) = policy.propose(journal, 1, in_flight)
        in_flight[proposal.key] += 1
    assert len({parent for _, parent in in_flight}) >= 3
    # Work already in flight on the best node steers the next proposal elsewhere.
    crowded = {(Operator.IMPROVE, "g3"): 3}
    assert MCTSPolicy(seed=0).propose(journal, 1, crowded)[0].parent_id != "g3"


def test_without_virtual_loss_work_piles_onto_one_node() -> None:
    # The control for the test above: with no virtual loss nothing but widening spreads work.
    proposals = MCTSPolicy(seed=0, virtual_loss=0.0, exploration=0.0).propose(
        _four_good(), 8, {})
    assert Counter(p.parent_id for p in proposals).most_common(1)[0][1] >= 4


def _draft_with_chain(visits: int) -> Journal:
    # Two drafts, and a chain under "a" so the root has `visits` finished visits in all.
    nodes = [make_node("a", metric=0.5), make_node("b", metric=0.4, step=1)]
    for i in range(visits - 2):
        nodes.append(make_node(f"c{i}", nodes[-1].node_id if i else "a", metric=0.45,
                               step=2 + i))
    return Journal(nodes)


@pytest.mark.parametrize(("visits", "drafts"), [(4, False), (5, True), (9, True)])
def test_progressive_widening_opens_drafts_as_root_is_visited(visits: int, drafts: bool) -> None:
    # Two drafts exist: a third is allowed once 2 < ceil(1.0 * visits ** 0.5), i.e. visits > 4.
    policy = MCTSPolicy(seed=0, num_drafts=1, widening_k=1.0, widening_alpha=0.5)
    first = policy.propose(_draft_with_chain(visits), 1, {})[0]
    assert (first.operator is Operator.DRAFT) is drafts


def test_widening_counts_drafts_in_flight_and_drafts_first() -> None:
    policy = MCTSPolicy(seed=0, num_drafts=3)
    proposals = policy.propose(Journal(), 3, {})
    assert [p.operator for p in proposals] == [Operator.DRAFT] * 3
    assert len({p.hint for p in proposals}) == 3
    # 9 visits allow ceil(sqrt(9)) = 3 drafts; with 3 drafts done, more drafts need more visits.
    journal = _draft_with_chain(9)
    many = MCTSPolicy(seed=0, num_drafts=1).propose(journal, 30, {})
    n_drafts = sum(p.operator is Operator.DRAFT for p in many)
    # 39 visits in the end: at most ceil(sqrt(39)) = 7 drafts in all, 2 of them finished.
    assert 1 <= n_drafts <= 5


def _buggy_with_debugs(debug_children: int, fixed: bool = False) -> list[Node]:
    nodes = [make_node("x", status=Status.BUGGY)]
    for i in range(debug_children):
        status = Status.OK if fixed and i == 0 else Status.BUGGY
        nodes.append(make_node(f"x{i}", "x", operator=Operator.DEBUG, status=status,
                               metric=0.5, step=1 + i))
    return nodes


def _debug_parents(journal: Journal, n: int, **options: int) -> Counter[str | None]:
    policy = MCTSPolicy(seed=0, num_drafts=1, **options)  # type: ignore[arg-type]
    proposals = policy.propose(journal, n, {})
    return Counter(p.parent_id for p in proposals if p.operator is Operator.DEBUG)


def test_debug_budget_per_node() -> None:
    # One debug child so far: one more is allowed (budget 2), never two at once.
    assert _debug_parents(Journal(_buggy_with_debugs(1)), 10)["x"] == 1
    # Budget spent: no more debugs of x; its debug children are debugged instead.
    spent = _debug_parents(Journal(_buggy_with_debugs(2)), 10)
    assert spent["x"] == 0 and spent["x0"] == 1 and spent["x1"] == 1
    assert _debug_parents(Journal(_buggy_with_debugs(1)), 10, max_debug_per_node=1)["x"] == 0
    # A failure fixed once is improved through its fix, not repaired again.
    fixed = MCTSPolicy(seed=0, num_drafts=1).propose(Journal(_buggy_with_debugs(1, True)), 4, {})
    assert (Operator.DEBUG, "x") not in {p.key for p in fixed}
    assert (Operator.IMPROVE, "x0") in {p.key for p in fixed}


def test_debug_in_flight_blocks_a_second_debug() -> None:
    journal = Journal(_buggy_with_debugs(0))
    proposals = MCTSPolicy(seed=0, num_drafts=1).propose(journal, 4, {(Operator.DEBUG, "x"): 1})
    assert all(p.operator is Operator.DRAFT for p in proposals)


def test_max_debug_depth_and_temperature_rise() -> None:
    nodes = [make_node("a", status=Status.BUGGY)]
    for i, parent in enumerate(["a", "d1", "d2"]):
        nodes.append(make_node(f"d{i + 1}", parent, operator=Operator.DEBUG,
                               status=Status.BUGGY, step=i + 1))
    policy = MCTSPolicy(seed=0, num_drafts=1, max_debug_depth=3)
    deep = policy.propose(Journal(nodes), 6, {})
    assert (Operator.DEBUG, "d3") not in {p.key for p in deep}  # d3 sits at debug depth 3
    # With one debug per node, a, d1 and d2 are spent too: only drafts are left.
    single = MCTSPolicy(seed=0, num_drafts=1, max_debug_per_node=1)
    assert all(p.operator is Operator.DRAFT for p in single.propose(Journal(nodes), 6, {}))
    # widening_k=0.5 keeps the root and the chain closed, so UCT walks down to the leaf.
    narrow = MCTSPolicy(seed=0, num_drafts=1, max_debug_depth=3, widening_k=0.5)
    shallow = narrow.propose(Journal(nodes[:3]), 1, {})[0]
    assert (shallow.operator, shallow.parent_id) == (Operator.DEBUG, "d2")
    assert shallow.temperature > policy.base_temperature


def test_improve_hints_differ_between_siblings() -> None:
    # widening_k=0.5 keeps the root closed, so every proposal improves the one node.
    journal = Journal([make_node("only", metric=1.0)])
    proposals = MCTSPolicy(seed=0, num_drafts=1, widening_k=0.5).propose(journal, 3, {})
    assert [p.key for p in proposals] == [(Operator.IMPROVE, "only")] * 3
    assert len({p.hint for p in proposals}) == 3


def test_cached_index_follows_a_growing_journal() -> None:
    # One policy sees one Journal grow; the other gets a new Journal object each call and so
    # rebuilds its index: same seed, same calls, so the proposals must match exactly.
    a, b = make_node("a", metric=0.5), make_node("b", "a", metric=0.9, step=1)
    journal = Journal([a])
    cached, rebuilt = MCTSPolicy(seed=0, num_drafts=1), MCTSPolicy(seed=0, num_drafts=1)
    assert cached.propose(journal, 2, {}) == rebuilt.propose(Journal([a]), 2, {})
    journal.add(b)
    grown = cached.propose(journal, 4, {})
    assert grown == rebuilt.propose(Journal([a, b]), 4, {})
    assert (Operator.IMPROVE, "b") in {p.key for p in grown}


def test_spreads_wider_than_greedy_in_simulation() -> None:
    assert simulate_spread("mcts") > simulate_spread("greedy")


def _program_journal(built_on_kept: int) -> Journal:
    """A baseline root, a kept feature program that beat it, and programs built on it."""
    base = make_node("base", operator=Operator.BASELINE, metric=0.5)
    kept = dataclasses.replace(
        make_node("kept", operator=Operator.FEATURES, metric=0.7, step=1),
        feature_set="kept", hint='{"name": "base", "family": "lgbm", "params": {}}',
        gate=Gate("base", (0.1,) * 5, True, "kept").to_json())
    children = [dataclasses.replace(
        make_node(f"c{i}", "kept", operator=Operator.FEATURES, metric=0.6, step=2 + i),
        feature_set=f"c{i}", hint='{"name": "kept", "family": "lgbm", "params": {}}',
        gate=Gate("kept", (-0.1,) * 5, False, "not kept").to_json())
        for i in range(built_on_kept)]
    return Journal([base, kept, *children])


def test_mcts_writing_features_picks_the_set_to_extend_by_uct() -> None:
    # Few programs on the kept set: it scores better, so it is extended, paired with itself
    # (the best configuration on it).
    policy = MCTSPolicy(seed=0, writes="features")
    (first,) = policy.propose(_program_journal(1), 1, {})
    assert first.operator is Operator.FEATURES
    assert (first.parent_id, first.idea, first.family) == ("kept", "kept", "lgbm")
    # Many programs on it, none kept: exploring the columns as they are wins, with the
    # baseline as the reference.
    (later,) = policy.propose(_program_journal(12), 1, {})
    assert (later.parent_id, later.idea) == (None, "base")
    # Nothing scored yet: no program can be paired, so it waits for the floor.
    assert policy.propose(Journal([]), 2, {}) == []
