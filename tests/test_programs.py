"""The feature-program gate's rule and records (search/programs.py): pure, milliseconds."""

from __future__ import annotations

import dataclasses
import random
import statistics

import pytest

from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal
from search.programs import (
    GATE_PAIRS,
    KEEP_ALPHA,
    PATIENCE,
    RECORD_FROM,
    REJECTED,
    Gate,
    best_feature_set,
    gate_of,
    gate_pairs,
    is_question,
    keep_rule,
    kept_programs,
    program_counts,
    program_temperature,
    programs_over_share,
    programs_spent,
    screen,
    sign_test,
)
from search.programs import judge as judge_gate
from tests.helpers import make_node


@pytest.mark.parametrize(("gains", "kept"), [
    # three splits of 5 folds, every group better, by much against the spread
    ([0.01, 0.02, 0.01, 0.03, 0.001] * 3, True),
    ([0.01, 0.02, 0.01, 0.03, -0.001] * 3, True),  # a group a hair worse: still clearly better
    ([0.01, 0.02, 0.01, -0.01, -0.001], False),  # 3 of 5: within the spread
    ([0.0, 0.0, 0.0, 0.0, 0.0], False),  # changes nothing
    ([-1e-10, 2e-10, 1e-10, 1e-10, 0.0], False),  # float noise of a copied column
    ([0.001, 0.001, 0.002, 0.1, 1e-6], False),  # one lucky group carries the mean
    ([0.1, 0.1, 0.1, 0.1, -1e-6], True),
    ([0.01, 0.01, 0.01, 0.01, 0.01], True),  # no spread at all
    ([0.01, 0.02], False),  # two groups: too few to tell at this level
    ([0.01, -0.001], False),
    ([0.01], False),  # one group cannot tell a program from noise
    ([0.01, float("nan"), 0.02, 0.02, 0.02], False),  # a group without a score
    ([], False),
])
def test_keep_rule(gains: list[float], kept: bool) -> None:
    decided, reason = keep_rule(gains)
    assert decided is kept
    allowed = ("kept",) if kept else ("not kept", "no comparable score on every group of rows")
    assert reason.split(":")[0] in allowed


def test_the_keep_rule_says_what_it_counted_and_what_it_needs() -> None:
    assert keep_rule([0.002, 0.003, 0.001, 0.002, 0.0025]) == (
        True, "kept: better on 5 of 5 groups, mean gain +0.0021, p 0.002")
    assert keep_rule([0.002, 0.003, 0.001, -0.002, 0.0025]) == (
        False, f"not kept: better on 4 of 5 groups, mean gain +0.0013, p 0.109 (needs p < "
        f"{KEEP_ALPHA:g})")


def _planted(rng: random.Random, effect: float, groups: int = 15) -> list[float]:
    """A program's gains on the gate's groups (3 splits of 5 folds): its effect plus noise."""
    return [rng.gauss(effect, 1.0) for _ in range(groups)]


def test_planted_null_programs_are_kept_at_the_rules_rate_and_good_ones_mostly() -> None:
    rng = random.Random(7)
    nulls = [keep_rule(_planted(rng, 0.0))[0] for _ in range(4000)]
    harmful = [keep_rule(_planted(rng, -0.3))[0] for _ in range(1000)]
    good = [keep_rule(_planted(rng, 0.8))[0] for _ in range(1000)]
    assert statistics.fmean(nulls) == pytest.approx(KEEP_ALPHA, abs=0.012)
    assert statistics.fmean(harmful) < 0.01
    assert statistics.fmean(good) > 0.75
    # the rule before issue 74, every one of 5 folds better, kept such a program 3 times in 10
    every_group = [min(g) > 0 for g in (_planted(rng, 0.8, 5) for _ in range(1000))]
    assert statistics.fmean(every_group) < 0.4


def test_a_family_without_a_seed_fits_one_pair_a_split() -> None:
    assert gate_pairs(True) == GATE_PAIRS
    assert len({split for split, _ in GATE_PAIRS}) == 3 and 0 not in {s for _, s in GATE_PAIRS}
    assert gate_pairs(False) == tuple(
        next(p for p in GATE_PAIRS if p[0] == split) for split in (0, 1, 2))


def features_node(node_id: str, gate: Gate | None, *, metric: float = 1.0,
                  status: Status = Status.OK, error: str = "", llm: float = 3.0):
    node = make_node(node_id, operator=Operator.FEATURES, metric=metric, status=status)
    return dataclasses.replace(node, gate=gate.to_json() if gate else "", error=error,
                               llm_seconds=llm, feature_set=node_id)


def test_gate_round_trip_and_counts() -> None:
    kept = Gate("ref", (0.01, 0.02, 0.01, 0.01, 0.0), True, "kept", ("ratio",))
    lost = Gate("ref", (0.01, -0.02, 0.01, -0.01, 0.0), False, "not kept")
    assert Gate.from_json(kept.to_json()) == kept
    assert Gate.from_json("{not json") is None
    nodes = [features_node("a", kept, metric=0.9), features_node("b", lost, metric=0.95),
             features_node("c", None, status=Status.BUGGY, error=f"{REJECTED} reads the target"),
             features_node("d", None, status=Status.TIMEOUT, error="timed out"),
             features_node("e", kept, metric=0.93),
             make_node("p", operator=Operator.PORTFOLIO)]
    counts = program_counts(nodes)
    assert (counts.proposed, counts.rejected, counts.failed, counts.scored, counts.kept) == (
        5, 1, 1, 3, 2)
    assert counts.median_llm_seconds == 3.0
    assert counts.exec_seconds == 5.0  # the five programs' runs, 1 s each; not the portfolio's
    assert gate_of(nodes[5]) is None and gate_of(nodes[0]) == kept
    journal = Journal(nodes)
    # best first among kept only: b scored higher but was not kept
    assert [n.node_id for n in kept_programs(journal)] == ["e", "a"]
    assert best_feature_set(journal) == "e"
    assert best_feature_set(Journal(nodes[1:4])) == ""


@pytest.mark.parametrize(("first_pair", "another"), [
    ([0.1, 0.2, 0.1, 0.3, 0.1], True),  # every group better
    ([0.1, -0.2, -0.1, 0.3, 0.1], True),  # a gain by the mean: the other pairs decide
    ([0.1, -0.2, -0.1, -0.3, 0.1], False),  # a loss by the mean
    ([0.0, 0.0, 0.0, 0.0, 0.0], False),  # changes nothing
    ([0.1, 0.2, 0.1, 0.3, float("nan")], False),  # a group with no score
    ([0.1], False),  # one group tells nothing
])
def test_a_first_pair_that_gains_by_the_mean_earns_the_others(
        first_pair: list[float], another: bool) -> None:
    gate = screen("ref", ("ab",), [first_pair], reused=True, splits=(0,))
    assert (gate is None) is another
    if gate is not None:
        assert not gate.kept and gate.pairs == 1 and gate.reused
        assert gate.seed_gains == (tuple(first_pair),) and gate.splits == (0,)
        assert "with its first pair" in gate.reason


def test_the_gate_judges_each_split_by_the_mean_over_its_pairs() -> None:
    pairs = [[0.1, 0.2, -0.1, 0.3, 0.1], [0.1, 0.0, 0.3, 0.1, 0.1],  # split 0
             [0.2, 0.1, 0.0, 0.1, 0.2], [0.0, 0.1, 0.2, 0.1, 0.0],  # split 1
             [0.1, 0.1, 0.1, 0.1, -0.1]]  # split 2
    gate = judge_gate("ref", ("ab",), pairs, reused=False, splits=(0, 0, 1, 1, 2))
    assert gate.kept and gate.pairs == 5 and gate.splits == (0, 0, 1, 1, 2)
    assert gate.gains == pytest.approx([0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1,
                                        0.1, 0.1, 0.1, 0.1, -0.1])
    assert Gate.from_json(gate.to_json()) == gate
    refused = judge_gate("ref", ("ab",), [[0.1, -0.2, 0.1, -0.1, 0.05]] * 2, reused=False,
                         splits=(0, 0))
    assert not refused.kept and "needs p <" in refused.reason
    # without splits, every pair is on the run's folds: the mean over them per fold
    assert judge_gate("ref", (), pairs[:2], reused=False).gains == pytest.approx(
        [0.1, 0.1, 0.1, 0.2, 0.1])
    # a gate stored before the pairs were kept one by one, or before splits, reads back
    old = '{"reference": "r", "gains": [0.1], "kept": false, "reason": "x"}'
    assert Gate.from_json(old) == Gate("r", (0.1,), False, "x")


def test_the_llm_is_spent_after_patience_programs_in_a_row_not_kept() -> None:
    kept = Gate("ref", (0.01, 0.02, 0.01, 0.01, 0.0), True, "kept")
    scored = Gate("ref", (0.01, -0.02, 0.01, -0.01, 0.0), False, "not kept")
    after_keep = [features_node("k", kept),
                  features_node("s", scored),  # scored below the rule
                  features_node("r", None, status=Status.BUGGY, error=f"{REJECTED} reads y"),
                  features_node("f", None, status=Status.TIMEOUT, error="timed out"),
                  features_node("x", None, status=Status.LOST, error="executor failed"),
                  make_node("t", operator=Operator.TUNE)]
    journal = Journal(after_keep)
    # three finished programs since the keep (a lost one is proposed again, a tune is no program)
    assert programs_spent(journal, 3) == "3 feature programs in a row were not kept"
    assert not programs_spent(journal, 4)  # the kept one is among the last four
    assert not programs_spent(journal, 0)  # 0: never
    assert not programs_spent(Journal(after_keep[1:3]), 3)  # fewer than patience so far
    assert programs_spent(Journal(after_keep[1:3]), 2)


def test_the_sign_test_is_the_binomial_tail() -> None:
    assert sign_test(8, 8) == 1 / 256
    assert sign_test(6, 8) == pytest.approx(37 / 256)  # 28 + 8 + 1 ways of 6, 7 or 8 heads
    assert sign_test(0, 8) == 1.0


def test_the_llm_is_spent_once_its_programs_are_better_no_more_often_than_chance() -> None:
    def scored(node_id: str, mean: float, kept: bool = False) -> Node:
        return features_node(node_id, Gate("ref", (mean, mean, mean, mean, -mean), kept, ""))

    # better by the mean, kept now and then so that patience alone would wait
    good = [scored(f"g{i}", 0.01, kept=i % 4 == 0) for i in range(RECORD_FROM - 2)]
    at_chance = [*good[:3], *(scored(f"w{i}", -0.01) for i in range(3)),
                 scored("k", 0.01, kept=True), scored("z", 0.0)]  # 0: a tie, not better
    assert len(at_chance) == RECORD_FROM
    why = programs_spent(Journal(at_chance), PATIENCE)
    assert why == ("4 of 8 scored feature programs were better than their reference, as coin "
                   "tosses would be (sign test p 0.64)")
    assert not programs_spent(Journal(at_chance[:-1]), PATIENCE)  # too few scored to tell
    assert not programs_spent(Journal(at_chance), 0)  # 0: never
    # 6 of 8 better: p = 37/256, below RECORD_ALPHA, so it goes on
    better = [*good, scored("w", -0.01), scored("v", -0.02)]
    assert not programs_spent(Journal(better), PATIENCE)
    # refused and failed programs are no record of the gate's: they count for patience only
    refused = features_node("r", None, status=Status.BUGGY, error=f"{REJECTED} reads y")
    assert not programs_spent(Journal([*better, refused]), PATIENCE)


def test_each_refusal_in_a_row_widens_the_next_programs_sampling_up_to_a_ceiling() -> None:
    scored = features_node("s", Gate("ref", (0.01, -0.02), False, "not kept"))

    def refused(node_id: str) -> Node:
        return features_node(node_id, None, status=Status.BUGGY, error=f"{REJECTED} reads y")

    assert program_temperature(Journal([]), 0.7) == 0.7
    assert program_temperature(Journal([refused("r0"), scored]), 0.7) == 0.7  # the row ended
    two = program_temperature(Journal([scored, refused("r1"), refused("r2")]), 0.7)
    assert two == pytest.approx(1.0)
    lost = features_node("x", None, status=Status.LOST, error="executor failed")
    assert program_temperature(Journal([scored, refused("r1"), lost, refused("r2")]),
                               0.7) == pytest.approx(1.0)  # a lost one is proposed again
    failed = features_node("f", None, status=Status.TIMEOUT, error="timed out")
    assert program_temperature(Journal([refused("r1"), failed]), 0.7) == 0.7  # ran, so not
    many = Journal([refused(f"r{i}") for i in range(10)])
    assert program_temperature(many, 0.7) == 1.2


def test_programs_wait_while_they_took_more_than_their_share_of_the_executors() -> None:
    def ran(node: Node, seconds: float) -> Node:
        return dataclasses.replace(node, exec_seconds=seconds)

    scored = Gate("ref", (0.01, -0.02, 0.01, -0.01, 0.0), False, "not kept")
    nodes = [ran(make_node("t1", operator=Operator.TUNE), 10.0),
             ran(features_node("a", scored), 12.0),
             ran(make_node("e", operator=Operator.ENSEMBLE), 0.0)]
    assert programs_over_share(Journal(nodes), 0.5)  # 12 of 22 s
    more = [*nodes, ran(make_node("t2", operator=Operator.TUNE), 3.0)]
    assert not programs_over_share(Journal(more), 0.5)  # 12 of 25 s
    assert programs_over_share(Journal(more), 0.4)
    assert not programs_over_share(Journal(nodes), 1.0)  # 1: no limit
    assert not programs_over_share(Journal(nodes[:1]), 0.5)  # no program yet
    assert not programs_over_share(Journal(), 0.5)


def test_a_column_question_counts_against_neither_patience_nor_sampling() -> None:
    """The LLM asked a text column's kind answered "a plain category": a refusal on its text,
    yet no program idea of the LLM's was tried, so the programs after it run as if it were not
    there."""
    hint = Proposal(Operator.FEATURES, None, 0.0, idea="ref", family="lgbm",
                    column="savings_status").hint
    questions = [dataclasses.replace(
        features_node(f"q{i}", None, status=Status.BUGGY,
                      error=f"{REJECTED} the LLM reads 'savings_status' as a plain category"),
        hint=hint) for i in range(3)]
    assert all(map(is_question, questions))
    assert not is_question(features_node("p", None))
    assert not programs_spent(Journal(questions), 3)
    assert program_temperature(Journal(questions), 0.7) == 0.7
    refused = features_node("r", None, status=Status.BUGGY, error=f"{REJECTED} reads y")
    assert programs_spent(Journal([*questions, refused]), 1)
    assert program_temperature(Journal([refused, *questions]), 0.7) == pytest.approx(0.85)
