"""SELA-style policy (Chi et al. 2024, MetaGPT `ext/sela`): tree search over insight paths.

The LLM first proposes a pool of insights for each stage (data preprocessing, feature
engineering, model training) from the task preview: one `insights` node per stage, whose plan
holds the ideas as a JSON list. The tree's levels are those stages; a tree node is a path of
insight indices, e.g. (2, 0) = preprocessing idea 2 then feature idea 0; its children are the
first `children` ideas of the next stage (SELA's expansion takes the first five of the pool).
A rollout (`sela` node) asks the LLM to turn a path's insights into one script; its reward is
SELA's normalised valid score (`common.metric.normalised_score`: F1 as it is, 1/(1+RMSE)), and
counts for every prefix of the path.

Selection is SELA's UCT-DP: over every node of the tree (not a descent from the root), the one
maximising  mean reward + 1.4 * sqrt(ln visits(parent) / visits), where an unvisited node counts
0.8 visits. A selected visited node is expanded and a random child (then random existing
descendants) rolled out; an unvisited one is rolled out itself. SELA first rolls out the root
(no insights), which is also what this policy does while the pools are being written.

Failed rollouts: SELA re-runs a failing experiment (up to 3 runs). Here a failed rollout with
code gets debug steps (up to `max_debug_depth`, the same debug budget greedy and MCTS have), and
a rollout's reward is the best score along its debug chain, 0 if none ran. A terminal path whose
reward is still 0 may be rolled out again (SELA re-simulates those); one with a reward is closed
(SELA would only replay its cached reward). A stage whose insights replies failed
`insight_attempts` times falls back to `DEFAULT_INSIGHTS`.

State: everything is rebuilt from the Journal (insights nodes give the pools, each rollout node
its path through its `hint`), so a resumed run continues the same tree. Only which proposals are
in flight is remembered (the loop's in-flight counts are keyed by parent, not by path); it is
reconciled with those counts on every call and only steers concurrent workers apart.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice

from common.metric import normalised_score
from search.journal import Journal
from search.node import HintForm, Node, Operator, Status
from search.policy import InFlightKey, PolicyOptions, Proposal, register

Path = tuple[int, ...]
ROOT: Path = ()
_GONE = (Status.LOST, Status.KILLED)  # infrastructure, not outcomes: re-proposed, never counted

# SELA's stages (Chi et al. 2024), in the order a script runs them: the levels of its tree. Each
# has what an idea for it is about, for the insights prompt.
STAGES: tuple[tuple[str, str], ...] = (
    ("data preprocessing", "missing values, outliers, encoding of text columns, scaling"),
    ("feature engineering", "new features from the columns: ratios, products, aggregates, "
                            "binning, transforms"),
    ("model training", "the model family, its main hyperparameters, ensembling"),
)
STAGE_NAMES: tuple[str, ...] = tuple(name for name, _ in STAGES)


def encode_insights(insights: tuple[str, ...]) -> str:
    """How an insights node keeps its ideas: its `plan` is this JSON list."""
    return json.dumps(list(insights), ensure_ascii=False)


def decode_insights(plan: str) -> tuple[str, ...]:
    """The ideas an insights node holds; none when its plan is not a JSON list of strings."""
    try:
        data = json.loads(plan, strict=False)
    except ValueError:
        return ()
    if not isinstance(data, list):
        return ()
    return tuple(str(item) for item in data if isinstance(item, str) and item.strip())


# What a stage gets when the LLM could not write its insights: generic, always applicable ideas.
DEFAULT_INSIGHTS: dict[str, tuple[str, ...]] = {
    "data preprocessing": (
        "fill missing numeric values with the median and text values with the most frequent",
        "clip numeric outliers to the 1st and 99th percentiles",
        "standardise numeric columns",
        "log-transform skewed positive numeric columns",
        "drop columns that are constant or almost entirely missing",
    ),
    "feature engineering": (
        "add ratios of the most important numeric columns",
        "add pairwise products of a few numeric columns",
        "add row-wise sums and means of the numeric columns",
        "bin the most important numeric column into quantiles",
        "keep the features as they are",
    ),
    "model training": (
        "gradient boosting with lightgbm",
        "a random forest",
        "HistGradientBoosting from scikit-learn",
        "extra trees",
        "a linear model on standardised features",
    ),
}


def uct_dp(value: float, visits: float, parent_visits: float, exploration: float = 1.4,
           unvisited: float = 0.8) -> float:
    """SELA's UCT-DP score: an unvisited node counts `unvisited` visits and mean reward 0."""
    n = visits if visits > 0 else unvisited
    mean = value / visits if visits > 0 else 0.0
    return mean + exploration * math.sqrt(math.log(max(parent_visits, 1.0)) / n)


def node_reward(node: Node) -> float:
    """SELA's normalised valid score of a node; 0 for one without a score.

    The direction is read off the node: the engine stores `metric` = `metric_raw` for a
    maximised metric and its negation for a minimised one.
    """
    if not node.is_ok or node.metric_raw is None or node.metric is None:
        return 0.0
    return normalised_score(node.metric_raw, maximize=node.metric == node.metric_raw)


@dataclass
class _Chain:
    """One rollout and the debug steps that followed it."""

    path: Path
    reward: float = 0.0
    nodes: list[str] = field(default_factory=list)


class RolloutIndex:
    """What the Journal says about the SELA tree; extended as the (append-only) Journal grows."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.seen = 0
        self.attempts: dict[str, list[Node]] = {stage: [] for stage in STAGE_NAMES}
        self.chains: dict[str, _Chain] = {}  # by the rollout node's id
        self.chain_of: dict[str, str] = {}  # node id -> its rollout's id
        self.buggy: list[str] = []  # failed chain nodes with code, in journal order
        self.extend()

    def extend(self) -> None:
        for node in islice(self.journal, self.seen, None):
            self.seen += 1
            if node.status in _GONE:
                continue
            form = node.operator.traits.hint_form
            if form is HintForm.STAGE and node.hint in self.attempts:  # a stage's insights
                self.attempts[node.hint].append(node)
                continue
            if form is HintForm.PATH:  # a rollout of a path of insights
                path = Proposal.of(node).path
                self.chains[node.node_id] = _Chain(path)
                root = node.node_id
            elif node.operator.traits.repairs and node.parent_id in self.chain_of:
                root = self.chain_of[node.parent_id]
            else:
                continue  # nodes of other policies (a resumed run may switch): not in this tree
            chain = self.chains[root]
            self.chain_of[node.node_id] = root
            chain.nodes.append(node.node_id)
            chain.reward = max(chain.reward, node_reward(node))
            if node.is_buggy and node.code:
                self.buggy.append(node.node_id)

    def pool(self, stage: int, attempts: int) -> tuple[str, ...] | None:
        """The insights of a stage: the first good reply among its first `attempts`, else the
        defaults once that many failed; None while still open. Depends only on those first
        replies, so it never changes once settled."""
        name = STAGE_NAMES[stage]
        tried = self.attempts[name][:attempts]
        for node in tried:
            ideas = decode_insights(node.plan) if node.status is Status.OK else ()
            if ideas:
                return ideas
        return DEFAULT_INSIGHTS[name] if len(tried) >= attempts else None


class InsightTree:
    """Visit counts and reward sums per path for one `propose` call, in-flight work included."""

    def __init__(self, policy: SelaPolicy, index: RolloutIndex, pending: list[Path]) -> None:
        self.policy = policy
        self.pools = [index.pool(s, policy.insight_attempts) for s in range(policy.depth)]
        self.visits: dict[Path, float] = {}
        self.value: dict[Path, float] = {}
        self.expanded: set[Path] = set()
        self.running: dict[Path, int] = {}
        for chain in index.chains.values():
            self._count(chain.path, chain.reward)
        for path in pending:
            self.add_pending(path)

    def _count(self, path: Path, reward: float) -> None:
        for k in range(len(path) + 1):
            prefix = path[:k]
            self.visits[prefix] = self.visits.get(prefix, 0.0) + 1.0
            self.value[prefix] = self.value.get(prefix, 0.0) + reward
            if k < len(path):
                self.expanded.add(prefix)

    def add_pending(self, path: Path) -> None:
        """A rollout in flight: a visit with reward 0 on its path (virtual loss)."""
        self._count(path, 0.0)
        self.running[path] = self.running.get(path, 0) + 1

    def children(self, path: Path) -> list[Path]:
        if len(path) >= self.policy.depth:
            return []
        pool = self.pools[len(path)]
        if pool is None:
            return []
        return [(*path, i) for i in range(min(self.policy.children, len(pool)))]

    def existing(self) -> list[Path]:
        """Every non-root node of the tree: children of the root (once the first stage has its
        pool) and of every node that has been expanded, in breadth-first order."""
        out: list[Path] = []
        frontier = [ROOT]
        while frontier:
            path = frontier.pop(0)
            if path != ROOT and path not in self.expanded:
                continue
            for child in self.children(path):
                out.append(child)
                frontier.append(child)
        return out

    def selectable(self, path: Path) -> bool:
        visited = self.visits.get(path, 0.0) > 0
        if len(path) == self.policy.depth:
            # Re-roll a terminal path only while it has no reward and nothing running on it.
            return self.value.get(path, 0.0) == 0.0 and not self.running.get(path)
        return not visited or bool(self.children(path))

    def score(self, path: Path) -> float:
        return uct_dp(self.value.get(path, 0.0), self.visits.get(path, 0.0),
                      self.visits.get(path[:-1], 0.0), self.policy.exploration,
                      self.policy.unvisited)

    def insights(self, path: Path) -> tuple[str, ...]:
        texts = []
        for stage, i in enumerate(path):
            pool = self.pools[stage]
            assert pool is not None  # a path only reaches a stage whose pool is settled
            texts.append(pool[i])
        return tuple(texts)


@dataclass
class SelaPolicy(PolicyOptions):
    """SELA's search with its constants: c_explore 1.4, unvisited count 0.8, 5 children per
    expansion, depth 3 (one level per stage). `num_drafts` and `debug_prob` are accepted so one
    CLI can pass the same options to every policy; they do not apply here. Nor do `ideas`
    (SELA's ideas come from its insight pools), the retrieved cases (a SELA rollout follows its
    insight path, the baseline it reproduces has no memory), `writes` or `questions` (a SELA
    rollout is a whole script)."""

    exploration: float = 1.4
    unvisited: float = 0.8
    children: int = 5
    depth: int = len(STAGE_NAMES)
    insight_attempts: int = 2
    name: str = "sela"

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= len(STAGE_NAMES):
            raise ValueError(f"sela depth must be 1..{len(STAGE_NAMES)} (one level per stage)")
        self._rng = random.Random(self.seed)
        self._index: RolloutIndex | None = None
        # Hints of this policy's proposals still in flight, per in-flight key, oldest first.
        self._pending: dict[InFlightKey, list[str]] = {}

    def propose(
        self, journal: Journal, n: int, in_flight: Mapping[InFlightKey, int]
    ) -> list[Proposal]:
        index = self._index
        if index is None or index.journal is not journal or len(journal) < index.seen:
            index = self._index = RolloutIndex(journal)
        else:
            index.extend()
        self._reconcile(in_flight)
        rollouts = self._pending.get((Operator.SELA, None), [])
        tree = InsightTree(self, index, [Proposal.from_hint(Operator.SELA, None, 0.0, h).path
                                         for h in rollouts])
        asked = set(self._pending.get((Operator.INSIGHTS, None), []))
        debugging = {pid for (op, pid), count in in_flight.items()
                     if op.traits.repairs and pid is not None and count > 0}
        proposals = []
        for _ in range(n):
            proposal = self._one(journal, index, tree, asked, debugging)
            self._pending.setdefault(proposal.key, []).append(proposal.hint)
            proposals.append(proposal)
        return proposals

    def observe(self, node: Node) -> None:
        """Forget a finished proposal; everything else is read from the Journal."""
        hints = self._pending.get((node.operator, node.parent_id))
        if hints and node.hint in hints:
            hints.remove(node.hint)

    def _reconcile(self, in_flight: Mapping[InFlightKey, int]) -> None:
        # The loop's counts are the truth about how many are in flight; anything remembered
        # beyond them (dropped without a node) is forgotten, oldest first.
        for key in list(self._pending):
            keep = max(0, in_flight.get(key, 0))
            hints = self._pending[key]
            del hints[: max(0, len(hints) - keep)]
            if not hints:
                del self._pending[key]

    def _one(self, journal: Journal, index: RolloutIndex, tree: InsightTree, asked: set[str],
             debugging: set[str]) -> Proposal:
        """The next proposal, noted where the next one looks (the tree's pending rollouts, the
        stages asked, the leaves being debugged), so that it differs."""
        leaf = self._debuggable(journal, index, debugging)
        if leaf is not None:
            depth = journal.debug_depth(leaf) + 1
            # Seed 002: a debug that failed once needs a different idea, so sample wider.
            temperature = min(1.2, self.base_temperature + 0.15 * depth)
            debugging.add(leaf)
            return Proposal(Operator.DEBUG, leaf, temperature)
        if tree.visits.get(ROOT, 0.0) == 0:
            return self._rollout(tree, ROOT)  # SELA's first simulation: no insights at all
        for stage, name in enumerate(STAGE_NAMES[: self.depth]):
            if tree.pools[stage] is None and name not in asked:
                asked.add(name)
                return Proposal(Operator.INSIGHTS, None, self.base_temperature, stage=name)
        return self._rollout(tree, self._select(tree))

    def _debuggable(self, journal: Journal, index: RolloutIndex, debugging: set[str]) -> str | None:
        """The oldest failed rollout (or debug step) with code, no live child, debug budget
        left and no debug in flight: SELA finishes a failing run before it selects again."""
        for node_id in index.buggy:
            if node_id in debugging or journal.debug_depth(node_id) >= self.max_debug_depth:
                continue
            if all(child.status in _GONE for child in journal.children(node_id)):
                return node_id
        return None

    def _select(self, tree: InsightTree) -> Path:
        """UCT-DP over every node of the tree, then expansion and a random descent."""
        candidates = [p for p in tree.existing() if tree.selectable(p)]
        if not candidates:
            return ROOT  # pools still open, or every path closed: sample the plain solution
        scores = [tree.score(p) for p in candidates]
        top = max(scores)
        best = [p for p, s in zip(candidates, scores, strict=True) if s >= top - 1e-12]
        path = best[0] if len(best) == 1 else self._rng.choice(best)
        if tree.visits.get(path, 0.0) == 0 or len(path) == self.depth:
            return path
        path = self._rng.choice(tree.children(path))
        while path in tree.expanded and tree.children(path):
            path = self._rng.choice(tree.children(path))
        return path

    def _rollout(self, tree: InsightTree, path: Path) -> Proposal:
        proposal = Proposal(Operator.SELA, None, self.base_temperature, path=path,
                            insights=tree.insights(path))
        tree.add_pending(path)
        return proposal


@register("sela")
def _make(seed: int, **options: object) -> SelaPolicy:
    return SelaPolicy(seed=seed, **options)  # type: ignore[arg-type]
