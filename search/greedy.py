"""Greedy AIDE-style policy: draft a few roots, then debug buggy leaves or improve the best.

With retrieved cases (--memory), the first roots are recall drafts, one per case: the
LLM adapts another task's working code. They take the first of the `num_drafts` root slots
rather than adding roots ahead of them, so a case never delays the first improve step:
generated drafts fill the slots left.

Ensembles, the portfolio and tuning are the engine's own work (search/floor.py), not the
policy's.

With k proposals in flight it counts in-flight drafts toward `num_drafts`, never hands the
same buggy leaf to two workers at once, and lets several workers improve the best node
(each reply differs, and the prompt tells siblings what was already tried). With nothing to
debug or improve yet and its drafts in flight, it proposes nothing: their results come first.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from search.ideas import draft_idea, improve_idea
from search.journal import Journal
from search.node import Node, Operator
from search.policy import InFlightKey, Proposal, register

# Steps whose result may give greedy something to debug or improve.
LLM_STEPS = frozenset({Operator.DRAFT, Operator.RECALL, Operator.DEBUG, Operator.IMPROVE})


@dataclass
class GreedyPolicy:
    seed: int = 0
    num_drafts: int = 3
    debug_prob: float = 0.5
    max_debug_depth: int = 3
    base_temperature: float = 0.7
    ideas: str = "all"  # draft and improvement idea pools (search.ideas.IDEA_POOLS)
    # Retrieved cases (--memory): ids of other tasks' working code; each is adapted by one
    # recall draft, in the first root slots
    cases: tuple[str, ...] = ()
    name: str = "greedy"

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def propose(
        self, journal: Journal, n: int, in_flight: Mapping[InFlightKey, int]
    ) -> list[Proposal]:
        taken: dict[InFlightKey, int] = dict(in_flight)
        proposals = []
        for _ in range(n):
            proposal = self._one(journal, taken)
            if proposal is None:
                break
            taken[proposal.key] = taken.get(proposal.key, 0) + 1
            proposals.append(proposal)
        return proposals

    def observe(self, node: Node) -> None:
        """Greedy keeps no state beyond the journal."""

    def _one(self, journal: Journal, taken: Mapping[InFlightKey, int]) -> Proposal | None:
        drafts_in_flight = taken.get((Operator.DRAFT, None), 0)
        recalls_in_flight = taken.get((Operator.RECALL, None), 0)
        recalled = sum(n.operator is Operator.RECALL for n in journal.draft_nodes)
        if recalled + recalls_in_flight < len(self.cases):
            return Proposal(Operator.RECALL, None, self.base_temperature,
                            idea=self.cases[recalled + recalls_in_flight])
        n_drafts = len(journal.draft_nodes) - recalled + drafts_in_flight
        if n_drafts + recalled + recalls_in_flight < self.num_drafts:
            return Proposal(Operator.DRAFT, None, self.base_temperature,
                            idea=draft_idea(n_drafts, self.ideas))
        debuggable = [
            leaf
            for leaf in journal.buggy_leaves
            if journal.debug_depth(leaf.node_id) < self.max_debug_depth
            and taken.get((Operator.DEBUG, leaf.node_id), 0) == 0
        ]
        if debuggable and self._rng.random() < self.debug_prob:
            leaf = self._rng.choice(debuggable)
            temperature = debug_temperature(self.base_temperature,
                                            journal.debug_depth(leaf.node_id) + 1)
            return Proposal(Operator.DEBUG, leaf.node_id, temperature)
        # An ensemble is the engine's code, not something to hand the LLM to edit.
        best = max((n for n in journal.eligible_nodes if n.operator is not Operator.ENSEMBLE),
                   key=lambda n: (n.metric or 0.0, -n.step), default=None)
        if best is not None:
            siblings = len(journal.children(best.node_id))
            siblings += taken.get((Operator.IMPROVE, best.node_id), 0)
            return Proposal(Operator.IMPROVE, best.node_id, self.base_temperature,
                            idea=improve_idea(siblings, self.ideas))
        if debuggable:
            leaf = self._rng.choice(debuggable)
            return Proposal(Operator.DEBUG, leaf.node_id, self.base_temperature)
        if any(op in LLM_STEPS for op, _ in taken):
            return None  # a step in flight may give something to improve or debug: wait for it
        return Proposal(Operator.DRAFT, None, self.base_temperature,
                        idea=draft_idea(n_drafts, self.ideas))


def debug_temperature(base: float, depth: int) -> float:
    """Sampling temperature of the `depth`-th debug step in a row (seed 002: a debug that
    failed once needs a different idea, so sample wider)."""
    return min(1.2, base + 0.15 * depth)


@register("greedy")
def _make(seed: int, **options: object) -> GreedyPolicy:
    return GreedyPolicy(seed=seed, **options)  # type: ignore[arg-type]
