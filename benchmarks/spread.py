"""How widely a policy spreads parallel work: distinct parents expanded with k in flight.

A synthetic run with no LLM and no execution: keep `in_flight` proposals pending; whenever one
finishes (a seeded random one, as workers finish out of order) add its node with a random
metric, and ask the policy for one replacement. Pure search code, so a benchmark or a test
can call it.
"""

from __future__ import annotations

import random
from collections import Counter

from search.journal import Journal
from search.node import Node, Status
from search.policy import InFlightKey, Proposal, make_policy


def simulate_spread(policy_name: str, proposals: int = 100, in_flight: int = 8, seed: int = 0,
                    *, buggy_rate: float = 0.0) -> int:
    """Distinct parents over the first `proposals` proposals; the virtual root counts as one.

    `buggy_rate` makes that share of finished nodes fail, to exercise debug proposals too.
    """
    rng = random.Random(seed)
    policy = make_policy(policy_name, seed=seed)
    journal = Journal()
    pending: list[Proposal] = []
    counts: Counter[InFlightKey] = Counter()
    parents: set[str | None] = set()
    made = 0

    def ask(k: int) -> None:
        nonlocal made
        for proposal in policy.propose(journal, k, counts):
            pending.append(proposal)
            counts[proposal.key] += 1
            parents.add(proposal.parent_id)
            made += 1

    ask(min(in_flight, proposals))
    while made < proposals:
        done = pending.pop(rng.randrange(len(pending)))
        counts[done.key] -= 1
        if counts[done.key] == 0:
            del counts[done.key]
        step = len(journal)
        failed = rng.random() < buggy_rate
        metric = rng.random()
        node = Node(
            node_id=f"n{step}", parent_id=done.parent_id, operator=done.operator, hint=done.hint,
            status=Status.BUGGY if failed else Status.OK, step=step,
            code=f"print({step})\n", code_hash=f"h{step}", metric=None if failed else metric,
        )
        journal.add(node)
        policy.observe(node)
        ask(1)
    return len(parents)


if __name__ == "__main__":
    from search.policy import available

    for name in available():
        for rate in (0.0, 0.3):
            print(f"{name:8s} buggy_rate={rate}: {simulate_spread(name, buggy_rate=rate)} "
                  "distinct parents per 100 proposals, 8 in flight")
