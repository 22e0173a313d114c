"""Greedy AIDE-style policy: draft a few roots, then debug buggy leaves or improve the best.

With retrieved cases (--memory), the first LLM steps are recalls, one per case. They take the
first of the `num_drafts` root slots rather than adding steps ahead of them, so a case never
delays the first improve step: generated drafts fill the slots left. With `case_nodes` (the
floor runs each case as stored, search/floor.py) a recall waits for its case node, seconds
after the start, and asks for one change to that node: the case's score on this task is then
known, and the model edits code that runs here rather than copying it (of 12 root recalls of
the 1.5B model, 5 returned the case unchanged). A case that failed here, or one the floor does
not run, is recalled as a root: the LLM adapts its code.

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
    case_nodes: bool = False  # the floor runs each case as stored: its recall improves that node
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
        n_drafts = (sum(n.operator is Operator.DRAFT for n in journal.draft_nodes)
                    + taken.get((Operator.DRAFT, None), 0))
        draft = Proposal(Operator.DRAFT, None, self.base_temperature,
                         idea=draft_idea(n_drafts, self.ideas))
        recalls = (sum(n.operator is Operator.RECALL for n in journal)
                   + sum(k for (op, _), k in taken.items() if op is Operator.RECALL))
        if recalls < len(self.cases):
            recall = self._recall(journal, self.cases[recalls])
            if recall is not None:
                return recall
            # Its case is yet to run (seconds): a draft may take a root slot the cases leave.
            return draft if n_drafts + len(self.cases) < self.num_drafts else None
        if n_drafts + recalls < self.num_drafts:
            return draft
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
        return draft

    def _recall(self, journal: Journal, case_id: str) -> Proposal | None:
        """The recall of a case: a child of its case node when that ran here, a root when it
        failed or is not run; None while the floor has yet to run it (wait: seconds)."""
        case = next((n for n in journal
                     if n.operator is Operator.CASE and n.hint == case_id), None)
        if self.case_nodes and case is None:
            return None
        parent = case.node_id if case is not None and case.is_ok else None
        return Proposal(Operator.RECALL, parent, self.base_temperature, idea=case_id)


def debug_temperature(base: float, depth: int) -> float:
    """Sampling temperature of the `depth`-th debug step in a row (seed 002: a debug that
    failed once needs a different idea, so sample wider)."""
    return min(1.2, base + 0.15 * depth)


@register("greedy")
def _make(seed: int, **options: object) -> GreedyPolicy:
    return GreedyPolicy(seed=seed, **options)  # type: ignore[arg-type]
