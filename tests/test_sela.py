"""The SELA-style policy: stage order, insight selection, UCT-DP on a hand-built tree, debug
chains, fallback insights, rebuild from the Journal. (A run and a resume through the real
engine are in tests/test_benchmarks.py, on the smoke suite's sela run.)"""

from __future__ import annotations

import math

import pytest

from operators.kinds.insights import insights_prompt
from operators.kinds.rollout import sela_prompt
from operators.replies import parse_insights
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal, make_policy
from search.sela import (
    DEFAULT_INSIGHTS,
    STAGE_NAMES,
    InsightTree,
    RolloutIndex,
    SelaPolicy,
    encode_insights,
    node_reward,
    uct_dp,
)
from tests.helpers import make_node
from tests.test_operators import CTX


def encode_path(path: tuple[int, ...], texts: tuple[str, ...]) -> str:
    return Proposal(Operator.SELA, path=path, insights=texts).hint


def decode_path(hint: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    proposal = Proposal.from_hint(Operator.SELA, None, 0.7, hint)
    return proposal.path, proposal.insights


POOLS = [tuple(f"{stage} idea {i}" for i in range(6)) for stage in STAGE_NAMES]


def insights_node(stage: int, step: int, *, ok: bool = True) -> Node:
    return Node(node_id=f"i{stage}-{step}", parent_id=None, operator=Operator.INSIGHTS,
                status=Status.OK if ok else Status.BUGGY, step=step, hint=STAGE_NAMES[stage],
                plan=encode_insights(POOLS[stage]) if ok else "")


def rollout(node_id: str, path: tuple[int, ...], step: int, metric: float | None,
            metric_raw: float | None = None) -> Node:
    texts = tuple(POOLS[s][i] for s, i in enumerate(path))
    ok = metric is not None
    return Node(node_id=node_id, parent_id=None, operator=Operator.SELA,
                status=Status.OK if ok else Status.BUGGY, step=step,
                hint=encode_path(path, texts), code=f"print({step})\n", code_hash=node_id,
                metric=metric, metric_raw=metric if metric_raw is None else metric_raw)


def with_pools(*nodes: Node) -> Journal:
    return Journal([insights_node(s, s) for s in range(3)] + list(nodes))


def paths(proposals: list[Proposal]) -> list[tuple[int, ...]]:
    return [decode_path(p.hint)[0] for p in proposals]


def test_stage_order_root_first_then_one_insights_request_per_stage() -> None:
    proposals = make_policy("sela", seed=0).propose(Journal(), 5, {})
    assert [(p.operator, p.hint) for p in proposals[:4]] == [
        (Operator.SELA, encode_path((), ())),
        (Operator.INSIGHTS, "data preprocessing"),
        (Operator.INSIGHTS, "feature engineering"),
        (Operator.INSIGHTS, "model training"),
    ]
    # The pools are still being written: the fifth worker re-samples the plain solution.
    assert proposals[4].operator is Operator.SELA and paths(proposals[4:]) == [()]
    assert all(p.parent_id is None for p in proposals)


def test_first_level_edges_pick_one_of_the_first_five_preprocessing_insights() -> None:
    journal = with_pools(rollout("root", (), 3, 0.5))
    proposals = make_policy("sela", seed=1).propose(journal, 5, {})
    chosen = paths(proposals)
    # Five unvisited children tie; virtual loss sends each worker to a different one.
    assert sorted(chosen) == [(0,), (1,), (2,), (3,), (4,)]
    for p in proposals:
        path, texts = decode_path(p.hint)
        assert texts == (POOLS[0][path[0]],)
        assert p.operator is Operator.SELA and p.parent_id is None


def test_uct_dp_formula() -> None:
    assert uct_dp(0.0, 0, 4) == pytest.approx(1.4 * math.sqrt(math.log(4) / 0.8))
    assert uct_dp(1.7, 2, 4) == pytest.approx(0.85 + 1.4 * math.sqrt(math.log(4) / 2))
    assert uct_dp(0.3, 1, 0) == pytest.approx(0.3)  # a parent not yet visited: no bonus


def test_uct_values_on_a_hand_built_tree() -> None:
    # root rollout 0.5; (0,) 0.8; (1,) 0.2; (0, 3) 0.9  ->  visits: root 4, (0,) 2, (1,) 1,
    # (0, 3) 1; (0,) is expanded, so (0, 0..4) exist; (2,), (3,), (4,) exist unvisited.
    journal = with_pools(rollout("r", (), 3, 0.5), rollout("a", (0,), 4, 0.8),
                         rollout("b", (1,), 5, 0.2), rollout("c", (0, 3), 6, 0.9))
    policy = SelaPolicy(seed=0)
    tree = InsightTree(policy, RolloutIndex(journal), [])
    by_hand = {
        (0,): 0.85 + 1.4 * math.sqrt(math.log(4) / 2),     # 2.015577
        (1,): 0.2 + 1.4 * math.sqrt(math.log(4) / 1),      # 1.848374
        (2,): 1.4 * math.sqrt(math.log(4) / 0.8),          # 1.842939
        (0, 3): 0.9 + 1.4 * math.sqrt(math.log(2) / 1),    # 2.065577
        (0, 0): 1.4 * math.sqrt(math.log(2) / 0.8),        # 1.303153
    }
    for path, value in by_hand.items():
        assert tree.score(path) == pytest.approx(value)
    assert by_hand[(0, 3)] == pytest.approx(2.065577, abs=1e-6)
    assert set(tree.existing()) == {(0,), (1,), (2,), (3,), (4,), *((0, i) for i in range(5))}
    # (0, 3) has the best UCT-DP and was visited: it is expanded, one model insight is added.
    (proposal,) = policy.propose(journal, 1, {})
    path, texts = decode_path(proposal.hint)
    assert path[:2] == (0, 3) and len(path) == 3 and path[2] < 5
    assert texts == (POOLS[0][0], POOLS[1][3], POOLS[2][path[2]])


def test_reward_is_selas_normalised_score() -> None:
    assert node_reward(rollout("f1", (), 0, 0.75)) == 0.75
    # rmse 2.0 is stored as metric -2.0 (higher is better): SELA scores it 1 / (1 + 2).
    assert node_reward(rollout("rmse", (), 0, -2.0, metric_raw=2.0)) == pytest.approx(1 / 3)
    assert node_reward(rollout("bad", (), 0, None)) == 0.0


def test_failed_rollout_is_debugged_and_its_chain_keeps_the_best_score() -> None:
    failed = rollout("f", (2,), 3, None)
    journal = with_pools(failed)
    policy = SelaPolicy(seed=0, max_debug_depth=2)
    first = policy.propose(journal, 2, {})
    assert (first[0].operator, first[0].parent_id) == (Operator.DEBUG, "f")
    assert first[1].operator is not Operator.DEBUG  # never two repairs of one failure at once
    journal.add(make_node("f1", "f", operator=Operator.DEBUG, status=Status.BUGGY, step=4))
    assert policy.propose(journal, 1, {})[0].parent_id == "f1"
    journal.add(make_node("f2", "f1", operator=Operator.DEBUG, metric=0.7, step=5))
    index = RolloutIndex(journal)
    (chain,) = index.chains.values()
    assert chain.path == (2,) and chain.reward == 0.7 and chain.nodes == ["f", "f1", "f2"]
    assert all(p.operator is not Operator.DEBUG for p in policy.propose(journal, 4, {}))


def test_debug_budget_per_rollout_is_bounded() -> None:
    journal = with_pools(rollout("f", (1,), 3, None),
                         make_node("f1", "f", operator=Operator.DEBUG, status=Status.BUGGY,
                                   step=4))
    proposals = SelaPolicy(seed=0, max_debug_depth=1).propose(journal, 3, {})
    assert all(p.operator is Operator.SELA for p in proposals)


def test_terminal_path_with_a_reward_is_closed_and_one_without_is_retried() -> None:
    policy = SelaPolicy(seed=0, depth=1, children=2)  # a tiny tree: the root and two leaves
    done = with_pools(rollout("r", (), 3, 0.5), rollout("a", (0,), 4, 0.9),
                      rollout("b", (1,), 5, None))
    b = done.get("b")
    done.add(make_node("b1", "b", operator=Operator.DEBUG, status=Status.BUGGY, step=6,
                       code=""))  # no code to repair: the chain ends with reward 0
    assert paths(policy.propose(done, 3, {})) == [(1,), (), ()]
    assert b.node_id in RolloutIndex(done).chains


def test_failed_insights_fall_back_to_built_in_ideas_after_two_attempts() -> None:
    nodes = [insights_node(0, 0, ok=False), insights_node(0, 1, ok=False),
             insights_node(1, 2), insights_node(2, 3), rollout("r", (), 4, 0.5)]
    journal = Journal(nodes)
    index = RolloutIndex(journal)
    assert index.pool(0, 2) == DEFAULT_INSIGHTS["data preprocessing"]
    assert index.pool(1, 2) == POOLS[1]
    assert index.pool(0, 3) is None  # with three attempts allowed the stage is still open
    (proposal,) = make_policy("sela", seed=0).propose(journal, 1, {})
    path, texts = decode_path(proposal.hint)
    assert texts == (DEFAULT_INSIGHTS["data preprocessing"][path[0]],)


def test_a_rebuilt_policy_continues_the_same_tree() -> None:
    """Resume: a fresh policy over the stored Journal proposes what the running one would."""
    journal = with_pools(rollout("r", (), 3, 0.5), rollout("a", (0,), 4, 0.8),
                         rollout("b", (1,), 5, 0.2), rollout("c", (0, 3), 6, 0.9))
    running = SelaPolicy(seed=4)
    for node in journal:
        running.observe(node)
    rebuilt = SelaPolicy(seed=4)
    assert running.propose(journal, 3, {}) == rebuilt.propose(Journal(journal.nodes), 3, {})


def test_in_flight_rollouts_spread_workers_and_finished_ones_are_forgotten() -> None:
    journal = with_pools(rollout("r", (), 3, 0.5))
    policy = SelaPolicy(seed=2)
    first = policy.propose(journal, 2, {})
    in_flight = {(Operator.SELA, None): 2}
    second = policy.propose(journal, 3, in_flight)
    assert len(set(paths(first + second))) == 5  # all five preprocessing ideas, once each
    node = rollout("x", paths(first)[0], 4, 0.6)
    journal.add(node)
    policy.observe(node)
    assert policy._pending[(Operator.SELA, None)] == [p.hint for p in first[1:] + second]


def test_prompts_and_parsing() -> None:
    stage = Proposal(Operator.INSIGHTS, None, 0.7, stage="feature engineering")
    prompt = insights_prompt(CTX, stage)
    text = prompt.messages[-1]["content"]
    assert prompt.tag == "insights" and "feature engineering" in text and "JSON list" in text
    hint = encode_path((1, 0), ("impute with the median", "add a ratio of a and b"))
    rollout_ = Proposal.from_hint(Operator.SELA, None, 0.7, hint)
    text = sela_prompt(CTX, rollout_).messages[-1]["content"]
    assert "- data preprocessing: impute with the median" in text
    assert "- feature engineering: add a ratio of a and b" in text
    assert "- model training: your choice" in text
    assert decode_path(hint) == ((1, 0), ("impute with the median", "add a ratio of a and b"))
    assert decode_path("a draft idea") == ((), ())
    assert parse_insights('sure:\n```json\n["a", "b", "A"]\n```').insights == ("a", "b")
    assert parse_insights('{"ideas": [{"idea": "x"}, {"text": "y"}]}').insights == ("x", "y")
    assert parse_insights("1. scale\n2) clip").insights == ("scale", "clip")
    assert parse_insights("no ideas today").problem
