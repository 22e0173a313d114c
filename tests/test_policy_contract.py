"""One contract suite run against every registered policy (Optuna's pytest_samplers style).

A new policy is picked up by `search.policy.available()` and must pass all of this unchanged.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping

import pytest

from benchmarks.spread import simulate_spread
from search.journal import Journal
from search.node import NODE_FIELDS, Node, Operator, Status
from search.policy import InFlightKey, Proposal, available, make_policy
from tests.helpers import make_node

POLICIES = available()
# Greedy improves the single best node by design; every tree policy must spread its workers.
SINGLE_PARENT_OK = {"greedy"}
# SELA's tree is over insight paths, not Journal parents: its rollouts are all roots, and its
# workers spread over what they are asked to do (stages, paths), which the hint names.
SPREAD_BY_HINT = {"sela"}


def spread(name: str, proposals: list[Proposal]) -> int:
    if name in SPREAD_BY_HINT:
        return len({(p.operator, p.parent_id, p.hint) for p in proposals})
    return len({p.parent_id for p in proposals})


def random_journal(size: int, seed: int) -> Journal:
    """A random tree: ~2% drafts, ~30% failures (half of those retried by a debug child)."""
    rng = random.Random(seed)
    nodes: list[Node] = []
    for i in range(size):
        parent = None if not nodes or rng.random() < 0.02 else rng.choice(nodes).node_id
        failed = rng.random() < 0.3
        operator = None
        if parent is not None and failed and rng.random() < 0.5:
            operator = Operator.DEBUG
        nodes.append(make_node(f"n{i}", parent, operator=operator, step=i,
                               status=Status.BUGGY if failed else Status.OK,
                               metric=round(rng.random(), 3)))
    return Journal(nodes)


def mixed_journal() -> Journal:
    nodes = [
        make_node("a", metric=0.5), make_node("b", metric=0.7, step=1),
        make_node("c", status=Status.BUGGY, step=2), make_node("d", metric=0.6, step=3),
        make_node("a1", "a", metric=0.55, step=4), make_node("b1", "b", metric=0.72, step=5),
        make_node("b2", "b", status=Status.TIMEOUT, step=6),
        make_node("c1", "c", operator=Operator.DEBUG, status=Status.BUGGY, step=7),
        make_node("d1", "d", status=Status.BUGGY, step=8),
        make_node("b11", "b1", metric=0.71, step=9),
    ]
    return Journal(nodes)


def all_buggy_journal() -> Journal:
    nodes = [make_node(f"r{i}", status=Status.BUGGY, step=i) for i in range(3)]
    nodes += [make_node("r0d", "r0", operator=Operator.DEBUG, status=Status.OOM, step=3),
              make_node("r1x", "r1", operator=Operator.DEBUG, status=Status.BUGGY, step=4,
                        code="")]
    return Journal(nodes)


def signature(proposals: list[Proposal]) -> list[tuple[str, str | None, float, str]]:
    return [(p.operator.value, p.parent_id, p.temperature, p.hint) for p in proposals]


def check_valid(journal: Journal, proposals: list[Proposal], n: int, *, may_wait: bool = False
                ) -> None:
    """Up to n valid proposals; none only where `may_wait` (its own steps are in flight)."""
    assert (0 if may_wait else 1) <= len(proposals) <= n
    for p in proposals:
        assert isinstance(p.operator, Operator)
        assert p.parent_id is None or p.parent_id in journal
        if p.operator is Operator.DRAFT:
            assert p.parent_id is None
        if p.operator is Operator.IMPROVE:
            assert p.parent_id is not None and journal.get(p.parent_id).is_ok
        if p.operator is Operator.DEBUG:
            assert p.parent_id is not None
            parent = journal.get(p.parent_id)
            assert parent.is_buggy and parent.code


def check_no_double_debug(proposals: list[Proposal], in_flight: Mapping[InFlightKey, int]) -> None:
    keys = Counter(p.key for p in proposals if p.operator is Operator.DEBUG)
    for key, count in keys.items():
        assert count + in_flight.get(key, 0) == 1, f"{key} handed to two workers at once"


@pytest.fixture(scope="module")
def big_journal() -> Journal:
    return random_journal(10_000, seed=0)


@pytest.mark.parametrize("name", POLICIES)
def test_deterministic_under_seed(name: str) -> None:
    journal = mixed_journal()
    in_flight = {(Operator.IMPROVE, "b1"): 2, (Operator.DEBUG, "c1"): 1}
    runs = []
    for _ in range(2):
        policy = make_policy(name, seed=11)
        first = policy.propose(journal, 6, in_flight)
        runs.append(signature(first) + signature(policy.propose(journal, 6, in_flight)))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("n", [1, 5, 12])
def test_returns_n_valid_proposals(name: str, n: int) -> None:
    for journal in (mixed_journal(), all_buggy_journal(), Journal()):
        policy = make_policy(name, seed=0)
        check_valid(journal, policy.propose(journal, n, {}), n)


@pytest.mark.parametrize("name", POLICIES)
def test_in_flight_debug_not_repeated_and_work_spreads(name: str) -> None:
    nodes = [make_node(f"g{i}", metric=0.6 + 0.01 * i, step=i) for i in range(5)]
    nodes += [make_node(f"x{i}", f"g{i}", status=Status.BUGGY, step=5 + i) for i in range(4)]
    journal = Journal(nodes)
    in_flight = {(Operator.DEBUG, "x0"): 1, (Operator.IMPROVE, "g4"): 1}
    for seed in range(5):
        proposals = make_policy(name, seed=seed).propose(journal, 8, in_flight)
        check_valid(journal, proposals, 8)
        check_no_double_debug(proposals, in_flight)
        if name not in SINGLE_PARENT_OK:
            assert spread(name, proposals) > 1


@pytest.mark.parametrize("name", POLICIES)
def test_never_selects_on_test_metric(name: str) -> None:
    # The engine keeps test scores beside the nodes; a policy is only ever handed the Journal,
    # so two runs whose test scores disagree must propose the same things.
    nodes = mixed_journal().nodes
    rng = random.Random(3)
    test_scores = [{n.node_id: rng.random() for n in nodes} for _ in range(2)]
    test_scores[1] = {k: -v for k, v in test_scores[0].items()}
    results = []
    for _scores in test_scores:
        policy = make_policy(name, seed=5)
        results.append(signature(policy.propose(Journal(list(nodes)), 8, {})))
    assert results[0] == results[1]
    assert not [f for f in NODE_FIELDS if "test" in f.lower()]
    assert not [a for a in dir(Journal) if "test" in a.lower()]
    assert not [a for a in dir(Proposal) if "test" in a.lower()]


@pytest.mark.parametrize("name", POLICIES)
def test_all_buggy_and_empty_journals(name: str) -> None:
    journal = all_buggy_journal()
    in_flight: Counter[InFlightKey] = Counter()
    policy = make_policy(name, seed=0)
    for round_ in range(4):  # keep asking while earlier proposals are still in flight
        proposals = policy.propose(journal, 5, in_flight)
        check_valid(journal, proposals, 5, may_wait=round_ > 0)
        check_no_double_debug(proposals, in_flight)
        in_flight.update(p.key for p in proposals)
    empty = make_policy(name, seed=0).propose(Journal(), 4, {})
    check_valid(Journal(), empty, 4)
    assert all(p.parent_id is None for p in empty)


@pytest.mark.timing  # a wall-clock bound: alone, not beside parallel workers
@pytest.mark.parametrize("name", POLICIES)
def test_propose_is_fast_on_10k_nodes(name: str, big_journal: Journal) -> None:
    policy = make_policy(name, seed=0)
    in_flight = {(Operator.IMPROVE, "n10"): 2, (Operator.DEBUG, "n99"): 1,
                 (Operator.DRAFT, None): 1}
    times = []
    for _ in range(3):
        start = time.perf_counter()
        proposals = policy.propose(big_journal, 8, in_flight)
        times.append(time.perf_counter() - start)
    check_valid(big_journal, proposals, 8)
    print(f"\n{name}: propose(10k nodes, n=8) took {max(times) * 1000:.1f} ms (worst of 3)")
    assert max(times) < 1.0


@pytest.mark.parametrize("name", POLICIES)
def test_observe_accepts_nodes_and_keeps_determinism(name: str) -> None:
    journal = mixed_journal()
    runs = []
    for _ in range(2):
        policy = make_policy(name, seed=2)
        for node in journal:
            policy.observe(node)
        runs.append(signature(policy.propose(journal, 6, {(Operator.IMPROVE, "b"): 1})))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", POLICIES)
def test_simulated_spread(name: str) -> None:
    spread = simulate_spread(name, proposals=100, in_flight=8, seed=0)
    print(f"\n{name}: {spread} distinct parents per 100 proposals with 8 in flight")
    assert spread >= 1
    assert simulate_spread(name, seed=0) == spread  # the simulation itself is seeded
