"""Monte Carlo tree search over the Journal: UCT, virtual loss and progressive widening.

The tree is the Journal under a virtual root whose children are the drafts. Every finished node
is one visit. Its reward is its valid metric ranked among the Journal's ok nodes, in (0, 1]
(the best gets 1); a failed node gets 0. A node's value is the mean reward over its subtree.
An ok node that breaks a stated constraint (not eligible as best) gets half its reward.
Rewards and values are recomputed from the Journal on every `propose` (a sort and two linear
passes; ranks shift whenever a node arrives), and only the append-only structure (parents,
debug depths) is cached. So the policy holds no state that can drift from the Journal, and a
resumed run proposes what an unbroken one would.

A proposal in flight counts as `virtual_loss` visits with reward 0 on its parent's path, and
so does every proposal made earlier in the same call: N workers descend into N parts of the
tree instead of all improving the current favourite.

Selection descends from the root by UCT and stops at the first node where widening allows a
new child: a draft at the root, an improve at an ok node, a debug at a failed node that still
has debug budget. A node may get another child while it has fewer than
`ceil(widening_k * visits ** widening_alpha)` children (finished and in flight).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice

from search.floor import program_proposal, reference
from search.ideas import draft_idea, improve_idea
from search.journal import Journal
from search.node import Node, Operator
from search.policy import InFlightKey, PolicyOptions, Proposal, register
from search.programs import kept_programs, programs_turn

ROOT = 0  # index of the virtual root in a _Tree; journal nodes follow from 1


def rank_rewards(metrics: list[float]) -> list[float]:
    """Reward of each ok node: its rank among ok nodes scaled into (0, 1]; ties share a rank.

    Ranks, not min-max, so one outlier score does not squash every other node to ~0 or ~1, and
    the exploration constant means the same on RMSE and AUC tasks. The best node gets 1; the
    worst ok node still gets more than a failure's 0.
    """
    order = sorted(metrics)
    scale = 2 * len(order)
    # The mean of the 1-based ranks lo+1 .. hi that a run of ties occupies is (lo + hi + 1) / 2.
    return [(bisect_left(order, m) + bisect_right(order, m) + 1) / scale for m in metrics]


def uct(value_sum: float, visits: float, parent_visits: float, exploration: float) -> float:
    """UCB1 score of a child: mean reward plus the exploration bonus."""
    return value_sum / visits + exploration * math.sqrt(math.log(parent_visits) / visits)


class _Index:
    """The facts about the Journal's nodes that never change once a node is in.

    Kept across calls and only extended, since a Journal only grows: rebuilding them every
    call would cost more than all the statistics together on a 10k-node Journal.
    """

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.nodes: list[Node | None] = [None]  # index 0 is the virtual root
        self.index: dict[str, int] = {}
        self.parent = [ROOT]
        self.children: list[list[int]] = [[]]
        self.n_children = [0]
        self.debug_children = [0]
        self.debug_depth = [0]
        self.fixed = [False]
        self.ok = [False]
        self.eligible = [False]
        self.repairable = [False]
        self.ok_nodes: list[int] = []
        self.ok_metrics: list[float] = []
        self.drafts = 0
        self.recalls = 0  # roots adapting a retrieved case
        self.extend()

    def extend(self) -> None:
        for node in islice(self.journal, len(self.nodes) - 1, None):
            i = len(self.nodes)
            p = ROOT if node.parent_id is None else self.index[node.parent_id]
            self.nodes.append(node)
            self.index[node.node_id] = i
            self.parent.append(p)
            self.children.append([])
            self.children[p].append(i)
            self.n_children.append(0)
            self.n_children[p] += 1
            self.debug_children.append(0)
            self.debug_depth.append(0)
            self.fixed.append(False)
            self.ok.append(node.is_ok)
            self.repairable.append(node.is_repairable)
            self.eligible.append(self.journal.is_eligible(node))
            if node.is_ok:
                assert node.metric is not None
                self.ok_nodes.append(i)
                self.ok_metrics.append(node.metric)
            if p == ROOT and node.operator.traits.scored:
                self.drafts += 1
                self.recalls += node.operator.traits.draft and node.operator.traits.from_case
            if node.operator.traits.repairs and p != ROOT:
                self.debug_children[p] += 1
                self.debug_depth[i] = self.debug_depth[p] + 1
                # A failure already fixed once needs no second repair; improve the fix instead.
                self.fixed[p] = self.fixed[p] or node.is_ok


class _Tree:
    """Per-call statistics over an _Index; index 0 is the virtual root."""

    def __init__(self, index: _Index, in_flight: Mapping[InFlightKey, int],
                 policy: MCTSPolicy) -> None:
        self.policy = policy
        self.nodes = index.nodes
        self.parent = index.parent
        self.children = index.children
        self.debug_depth = index.debug_depth
        self.fixed = index.fixed
        self.ok = index.ok
        self.repairable = index.repairable
        self.n_children = index.n_children.copy()  # finished and in flight
        self.debug_children = index.debug_children.copy()
        self.drafts = index.drafts
        self.recalls = index.recalls
        size = len(self.nodes)
        self.debug_in_flight = [0] * size
        self.visits = [1.0] * size
        self.visits[ROOT] = 0.0
        self.value = [0.0] * size
        for i, reward in zip(index.ok_nodes, rank_rewards(index.ok_metrics), strict=True):
            # A node that breaks a stated constraint cannot be the answer: half its reward
            # keeps the search near it (an improvement may meet the limit) without favouring it.
            self.value[i] = reward if index.eligible[i] else reward / 2
        # The Journal only accepts a node whose parent it holds, so parents come first and one
        # backward pass sums every subtree.
        parent, visits, value = self.parent, self.visits, self.value
        for i in range(size - 1, 0, -1):
            visits[parent[i]] += visits[i]
            value[parent[i]] += value[i]
        for (operator, parent_id), count in in_flight.items():
            if count <= 0 or (parent_id is not None and parent_id not in index.index):
                continue  # a finished or foreign key: nothing of it is in this tree
            p = ROOT if parent_id is None else index.index[parent_id]
            for _ in range(count):
                self.add_in_flight(operator, p, refresh=False)
        self.live = [False] * size
        self.live_children = [0] * size
        live, live_children = self.live, self.live_children
        ok, repairable = self.ok, self.repairable
        for i in range(size - 1, 0, -1):
            if ok[i] or live_children[i] or (repairable[i] and self.expandable(i)):
                live[i] = True
                live_children[parent[i]] += 1
        live[ROOT] = True  # a draft is always possible

    def expandable(self, i: int) -> bool:
        """Whether node i may get a child now, ignoring widening."""
        if self.ok[i]:
            return True
        policy = self.policy
        return (
            self.repairable[i] and not self.fixed[i]
            and self.debug_depth[i] < policy.max_debug_depth
            and self.debug_children[i] < policy.max_debug_per_node
            # Two workers repairing the same failure at once would repeat each other.
            and self.debug_in_flight[i] == 0
        )

    def widening_allows(self, i: int, children: int) -> bool:
        policy = self.policy
        return children < math.ceil(policy.widening_k * self.visits[i] ** policy.widening_alpha)

    def add_in_flight(self, operator: Operator, p: int, *, refresh: bool = True) -> None:
        """Count one pending expansion of p: a child slot, and a 0-reward visit up the path."""
        self.n_children[p] += 1
        if p == ROOT and operator.traits.draft:
            self.drafts += 1
            self.recalls += operator.traits.from_case
        if operator.traits.repairs and p != ROOT:
            self.debug_children[p] += 1
            self.debug_in_flight[p] += 1
        i = p
        while True:
            self.visits[i] += self.policy.virtual_loss
            if i == ROOT:
                break
            i = self.parent[i]
        if refresh:
            self._refresh_live(p)

    def _refresh_live(self, i: int) -> None:
        # A debug in flight can close the last open slot of a subtree; tell the ancestors.
        while i != ROOT:
            live = self.expandable(i) or self.live_children[i] > 0
            if live == self.live[i]:
                return
            self.live[i] = live
            self.live_children[self.parent[i]] += 1 if live else -1
            i = self.parent[i]


@dataclass
class MCTSPolicy(PolicyOptions):
    """UCT over the Journal.

    `exploration` is the UCB1 constant c. Rewards lie in [0, 1], where UCB1's bound uses
    sqrt(2) ~ 1.41; 1.0 leans a little toward exploiting good subtrees because every visit is a
    full LLM call plus a training run, while virtual loss already spreads parallel workers.
    `debug_prob` is accepted so one CLI can pass the same options to every policy; UCT decides
    when to debug here. Retrieved cases get a recall root each for the first `recalls`, in the
    first root slots: MCTS recalls the nearest; it does not wait for the floor's case nodes
    (`case_nodes`, accepted like greedy's) to pick one.
    """

    exploration: float = 1.0
    virtual_loss: float = 1.0
    widening_k: float = 1.0
    widening_alpha: float = 0.5
    max_debug_per_node: int = 2
    name: str = "mcts"

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._index: _Index | None = None

    def propose(
        self, journal: Journal, n: int, in_flight: Mapping[InFlightKey, int]
    ) -> list[Proposal]:
        index = self._index
        # A Journal only grows; anything else (another Journal, a rebuilt one) starts afresh.
        if index is None or index.journal is not journal or len(journal) < len(index.nodes) - 1:
            index = self._index = _Index(journal)
        else:
            index.extend()
        tree = _Tree(index, in_flight, self)
        taken = dict(in_flight)
        proposals = []
        for _ in range(n):
            if self.writes == "features" or (self.writes == "both"
                                             and programs_turn(journal, taken)):
                program = self._program(journal, taken)
                if program is not None or self.writes == "features":
                    if program is None:  # no configuration scored yet: the floor's first
                        break
                    taken[program.key] = taken.get(program.key, 0) + 1
                    proposals.append(program)
                    continue
            proposal, p = self._select(tree)
            tree.add_in_flight(proposal.operator, p)
            taken[proposal.key] = taken.get(proposal.key, 0) + 1
            proposals.append(proposal)
        return proposals

    def _program(self, journal: Journal, taken: Mapping[InFlightKey, int]) -> Proposal | None:
        """A feature program on the feature set UCT picks: the kept sets and the columns as
        they are, valued by the rank of their score, visited once per program built on them
        (finished or in flight)."""
        sets = [("", reference(journal, ""))] + [(n.node_id, n) for n in kept_programs(journal)]
        scored = [(name, node) for name, node in sets if node is not None]
        if not scored:
            return None
        order = sorted(scored, key=lambda s: s[1].metric or 0.0)
        value = {name: (rank + 1) / len(order) for rank, (name, _) in enumerate(order)}
        built = {name: 1 + taken.get((Operator.FEATURES, name or None), 0) + sum(
            1 for c in journal.nodes_of(Operator.FEATURES) if (c.parent_id or "") == name)
            for name, _ in scored}
        total = sum(built.values())
        chosen = max(value, key=lambda name: (uct(value[name] * built[name], built[name],
                                                  total, self.exploration), value[name]))
        return program_proposal(journal, self.base_temperature, chosen,
                                questions=self.questions, in_flight=taken)

    def observe(self, node: Node) -> None:
        """Nothing to do: statistics are rebuilt from the Journal, the one source of truth."""

    @property
    def recalled(self) -> tuple[str, ...]:
        """The cases recall roots adapt."""
        return self.cases if self.recalls is None else self.cases[:self.recalls]

    def _select(self, tree: _Tree) -> tuple[Proposal, int]:
        i = ROOT
        while True:
            if i == ROOT:
                if (tree.drafts < max(self.num_drafts, len(self.recalled))
                        or tree.widening_allows(ROOT, tree.drafts)
                        or tree.live_children[ROOT] == 0):
                    return self._draft(tree), ROOT
            elif tree.expandable(i) and (tree.widening_allows(i, tree.n_children[i])
                                         or tree.live_children[i] == 0):
                return self._expand(tree, i), i
            i = self._best_child(tree, i)

    def _best_child(self, tree: _Tree, i: int) -> int:
        best: list[int] = []
        best_score = -math.inf
        for c in tree.children[i]:
            if not tree.live[c]:
                continue
            score = uct(tree.value[c], tree.visits[c], tree.visits[i], self.exploration)
            if score > best_score + 1e-12:
                best, best_score = [c], score
            elif score >= best_score - 1e-12:
                best.append(c)
        # Only live nodes are entered, and a live node has a live child or a slot of its own.
        assert best, "descended into a subtree with nothing left to expand"
        return best[0] if len(best) == 1 else self._rng.choice(best)

    def _draft(self, tree: _Tree) -> Proposal:
        if tree.recalls < len(self.recalled):  # retrieved cases first, a recall root each
            return Proposal(Operator.RECALL, None, self.base_temperature,
                            idea=self.recalled[tree.recalls])
        return Proposal(Operator.DRAFT, None, self.base_temperature,
                        idea=draft_idea(tree.drafts - tree.recalls, self.ideas))

    def _expand(self, tree: _Tree, i: int) -> Proposal:
        node = tree.nodes[i]
        assert node is not None
        if node.is_ok:
            return Proposal(Operator.IMPROVE, node.node_id, self.base_temperature,
                            idea=improve_idea(tree.n_children[i], self.ideas))
        depth = tree.debug_depth[i] + 1
        # Seed 002: a debug that failed once needs a different idea, so sample wider.
        temperature = min(1.2, self.base_temperature + 0.15 * depth)
        return Proposal(Operator.DEBUG, node.node_id, temperature)


@register("mcts")
def _make(seed: int, **options: object) -> MCTSPolicy:
    return MCTSPolicy(seed=seed, **options)  # type: ignore[arg-type]
