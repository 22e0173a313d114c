"""Engine-written ensembles of the best nodes found so far (issue 10: "an ensemble of two good
nodes"), proposed by policies and built here without an LLM call.

A 1.5B model rarely improves a tuned gradient-boosting root by editing it, but the search does
find different working models; averaging the best of them (probabilities or numbers) or letting
three vote (class labels) is a change that often helps and never needs the model to get code
right. The ensemble's members are named in its plan, so which sets were tried is read back from
the journal (and survives a resume).
"""

from __future__ import annotations

import re

from search.journal import Journal
from search.node import Node, Operator

_PLAN = re.compile(r"^engine ensemble \((?:mean|vote)\) of nodes ([0-9a-f, ]+)$")


def members(journal: Journal, size: int) -> list[str] | None:
    """The `size` best eligible nodes with harness model code and distinct valid scores (clones of
    one model add nothing), best first; None when there are not enough of them."""
    chosen: list[Node] = []
    scores: set[float] = set()
    for node in sorted(journal.eligible_nodes, key=lambda n: (-(n.metric or 0.0), n.step)):
        if node.operator is Operator.ENSEMBLE or not node.has_model_code:
            continue
        score = round(node.metric_raw or 0.0, 9)
        if score in scores:
            continue
        scores.add(score)
        chosen.append(node)
        if len(chosen) == size:
            return [n.node_id for n in chosen]
    return None


def plan(member_ids: list[str], vote: bool) -> str:
    return f"engine ensemble ({'vote' if vote else 'mean'}) of nodes {', '.join(member_ids)}"


def tried(journal: Journal) -> set[frozenset[str]]:
    """Member sets of every ensemble node already in the journal."""
    sets = set()
    for node in journal:
        match = _PLAN.match(node.plan) if node.operator is Operator.ENSEMBLE else None
        if match:
            sets.add(frozenset(i.strip() for i in match.group(1).split(",")))
    return sets


def next_members(journal: Journal, sizes: tuple[int, ...]) -> list[str] | None:
    """The first member set, smallest size first, that has not been ensembled yet."""
    done = tried(journal)
    for size in sizes:
        ids = members(journal, size)
        if ids is not None and frozenset(ids) not in done:
            return ids
    return None
