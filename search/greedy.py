"""Greedy AIDE-style policy: draft a few roots, then debug buggy leaves or improve the best.

With retrieved cases (--memory), the first roots are recall drafts (at most `recalls`): the
LLM adapts another task's working code. They take the first of the `num_drafts` root slots
rather than adding roots ahead of them, so a case never delays the first improve step:
generated drafts fill the slots left. With `case_nodes` (the floor runs every retrieved case
as stored, search/floor.py, seconds after the start) the recall adapts the case that did best
*here*: the first that beats the baseline root, or the best once all have run. Which case
works here is not known from the meta-features: the nearest case beat the baseline root in 8
of 12 runs (benchmarks/results/memory-2026-11-26d), and the 1.5B model's recall of a case
that did not beat it never did either.

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

from search.floor import program_proposal
from search.ideas import draft_idea, improve_idea
from search.journal import Journal
from search.node import Node, Operator
from search.policy import InFlightKey, PolicyOptions, Proposal, register
from search.programs import SCRIPT_STEPS, programs_turn

# Steps whose result may give greedy something to debug or improve.
LLM_STEPS = SCRIPT_STEPS


@dataclass
class GreedyPolicy(PolicyOptions):
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
        if self.writes == "features":  # none until the floor has scored a configuration
            return program_proposal(journal, self.base_temperature, questions=self.questions,
                                    in_flight=taken)
        if self.writes == "both" and programs_turn(journal, taken):
            program = program_proposal(journal, self.base_temperature,
                                       questions=self.questions, in_flight=taken)
            if program is not None:
                return program
        return self._script(journal, taken)

    def _script(self, journal: Journal, taken: Mapping[InFlightKey, int]) -> Proposal | None:
        drafts_in_flight = taken.get((Operator.DRAFT, None), 0)
        recalls_in_flight = taken.get((Operator.RECALL, None), 0)
        recalled = [n.hint for n in journal.nodes_of(Operator.RECALL) if n.parent_id is None]
        n_drafts = len(journal.draft_nodes) - len(recalled) + drafts_in_flight
        recalls = len(self.cases) if self.recalls is None else min(self.recalls,
                                                                    len(self.cases))
        if len(recalled) + recalls_in_flight < recalls:
            case_id = self._case_to_recall(journal, recalled, recalls_in_flight)
            if case_id is not None:
                return Proposal(Operator.RECALL, None, self.base_temperature, idea=case_id)
            # Its cases are yet to run here (seconds): a draft may take a slot they leave.
            if n_drafts + recalls >= self.num_drafts:
                return None
        if n_drafts + len(recalled) + recalls_in_flight < self.num_drafts:
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
        best = max((n for n in journal.eligible_nodes if not n.operator.traits.combines),
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

    def _case_to_recall(self, journal: Journal, recalled: list[str],
                        in_flight: int) -> str | None:
        """The case the next recall adapts; None: wait for the floor's case nodes. Without
        them, the nearest not yet recalled. With them, of those that ran ok here, the best
        once one beats the baseline root or every case has run; the nearest when none ran ok.
        A recall in flight hides which case it took, so the next waits for it."""
        left = [c for c in self.cases if c not in recalled]
        if not self.case_nodes:
            return left[in_flight] if in_flight < len(left) else None
        if in_flight or not left:
            return None
        ran = {n.hint: n for n in journal.nodes_of(Operator.CASE) if n.hint in left}
        ok = sorted((n for n in ran.values() if n.is_ok and n.metric is not None),
                    key=lambda n: (-(n.metric or 0.0), left.index(n.hint)))
        if ok and (journal.beats_baseline(ok[0]) or len(ran) == len(left)):
            return ok[0].hint
        return left[0] if len(ran) == len(left) else None


def debug_temperature(base: float, depth: int) -> float:
    """Sampling temperature of the `depth`-th debug step in a row (seed 002: a debug that
    failed once needs a different idea, so sample wider)."""
    return min(1.2, base + 0.15 * depth)


@register("greedy")
def _make(seed: int, **options: object) -> GreedyPolicy:
    return GreedyPolicy(seed=seed, **options)  # type: ignore[arg-type]
