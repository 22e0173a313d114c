"""The Journal: an index over frozen nodes, and every derived fact a policy asks for.

Nodes are appended once and never change; children, depth, debug depth, best and buggy leaves
are computed from ids. Cached indexes make `add` O(1) and queries cheap on 10k nodes.
Eligibility is derived too: an ok node that breaks the run's `Constraints` is never `best`.
`best` is what the search steers by; `final` is what the run hands over, once a selection at
the end (engine/evaluation/select.py) has `choose`n it, and `best` until then.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from search.constraints import Constraints
from search.node import Node, Operator, Status


class Journal:
    def __init__(self, nodes: list[Node] | None = None,
                 constraints: Constraints | None = None) -> None:
        self.constraints = constraints or Constraints()
        self._nodes: dict[str, Node] = {}
        self._children: dict[str | None, list[str]] = {}
        self._by_operator: dict[Operator, list[str]] = {}
        self._hashes: dict[str, str] = {}
        self._best: Node | None = None
        self._baseline: Node | None = None
        self._chosen: Node | None = None
        self._held_back: frozenset[str] = frozenset()
        for node in nodes or ():
            self.add(node)

    def add(self, node: Node) -> None:
        if node.node_id in self._nodes:
            raise ValueError(f"node {node.node_id} is already in the journal")
        if node.parent_id is not None and node.parent_id not in self._nodes:
            raise ValueError(f"node {node.node_id} names unknown parent {node.parent_id}")
        self._nodes[node.node_id] = node
        self._children.setdefault(node.parent_id, []).append(node.node_id)
        self._by_operator.setdefault(node.operator, []).append(node.node_id)
        if node.code_hash and node.status is not Status.LOST:
            self._hashes.setdefault(node.code_hash, node.node_id)
        if self.is_eligible(node) and (self._best is None or _key(node) > _key(self._best)):
            self._best = node
        if (self._baseline is None and node.operator.traits.reference and node.is_ok
                and node.parent_id is None):
            self._baseline = node

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes.values())

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def get(self, node_id: str) -> Node:
        return self._nodes[node_id]

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def children(self, node_id: str | None) -> list[Node]:
        """Children of a node; `None` gives the roots (drafts)."""
        return [self._nodes[c] for c in self._children.get(node_id, ())]

    def nodes_of(self, operator: Operator) -> list[Node]:
        """The nodes of one operator, in the order they were added."""
        return [self._nodes[i] for i in self._by_operator.get(operator, ())]

    def is_leaf(self, node_id: str) -> bool:
        return not self._children.get(node_id)

    def ancestors(self, node_id: str) -> list[Node]:
        """The path from the root down to this node, inclusive."""
        path = []
        current: str | None = node_id
        while current is not None:
            node = self._nodes[current]
            path.append(node)
            current = node.parent_id
        return path[::-1]

    def debug_depth(self, node_id: str) -> int:
        """How many debug steps in a row led to this node (0 for a non-debug node)."""
        depth = 0
        node = self._nodes[node_id]
        while node.operator.traits.repairs and node.parent_id is not None:
            depth += 1
            node = self._nodes[node.parent_id]
        return depth

    def find_code(self, code_hash: str) -> str | None:
        """Id of an earlier node with the same code, if any."""
        return self._hashes.get(code_hash)

    @property
    def draft_nodes(self) -> list[Node]:
        """LLM-written roots; the engine's baseline root is not a draft."""
        return [n for n in self.children(None) if n.operator.traits.draft]

    def baseline(self) -> Node | None:
        """The engine's baseline root, when it ran: what a node's gain is measured against."""
        return self._baseline

    def beats_baseline(self, node: Node) -> bool:
        """Whether a node ran and its valid score is better than the baseline root's."""
        base = self.baseline()
        return (node.is_ok and node.metric is not None and base is not None
                and base.metric is not None and node.metric > base.metric)

    @property
    def good_nodes(self) -> list[Node]:
        return [n for n in self._nodes.values() if n.is_ok]

    def is_eligible(self, node: Node) -> bool:
        """Ok and within every stated constraint: the nodes `best` chooses from."""
        return (node.is_ok and node.node_id not in self._held_back
                and not self.constraints.violations(node))

    def without(self, node_ids: Iterable[str]) -> Journal:
        """The same tree with the nodes of `node_ids` not eligible (the final selection's
        latency limit holding them back)."""
        journal = Journal(constraints=self.constraints)
        journal._held_back = frozenset(node_ids)
        for node in self._nodes.values():
            journal.add(node)
        return journal

    @property
    def eligible_nodes(self) -> list[Node]:
        return [n for n in self._nodes.values() if self.is_eligible(n)]

    @property
    def excluded_nodes(self) -> list[tuple[Node, list[str]]]:
        """Ok nodes that break a constraint, with the reasons."""
        return [(n, self.constraints.violations(n)) for n in self._nodes.values()
                if n.is_ok and not self.is_eligible(n)]

    @property
    def buggy_leaves(self) -> list[Node]:
        """Failed nodes with code and no child yet: the candidates for a debug step."""
        return [n for n in self._nodes.values() if n.is_repairable and self.is_leaf(n.node_id)]

    def best(self) -> Node | None:
        """The eligible node with the best valid metric; ties go to the earlier node."""
        return self._best

    def choose(self, node_id: str) -> None:
        """Make an eligible node the run's final answer, whatever its valid rank."""
        node = self._nodes[node_id]
        if not self.is_eligible(node):
            raise ValueError(f"node {node_id} is not eligible as the final answer")
        self._chosen = node

    def final(self) -> Node | None:
        """The run's answer: the node a final selection chose, else `best`."""
        return self._chosen or self._best

    def status_counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for node in self._nodes.values():
            counts[node.status.value] += 1
        return counts


def best_of(nodes: Iterable[Node]) -> Node | None:
    """The node with the best valid metric among `nodes` that have one, as `Journal.best`
    ranks them (ties go to the earlier node); None when none has one."""
    scored = [n for n in nodes if n.metric is not None]
    return max(scored, key=_key) if scored else None


def _key(node: Node) -> tuple[float, int]:
    # Earlier step wins a tie, so the best never flips between equal scores.
    assert node.metric is not None
    return (node.metric, -node.step)
