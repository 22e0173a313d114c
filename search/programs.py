"""Feature programs in the search: the gate's record on a node, the rule that keeps a program,
and what a report counts of them.

A feature program is one LLM-written function, `add_features(df) -> df`, that adds columns from
a row's own columns. The engine runs the floor's best configuration with it (on the chain of
programs already kept under it) and compares that with the same configuration without it on the
same held-out rows, on the run's folds and on other splits of the same rows into folds: the
gains on each group of rows decide, by one rule (`keep_rule`, a paired t test), whether it is
kept. A kept
program is a feature set: the floor trains on it from then on, and later programs build on it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal

InFlight = Mapping[tuple[Operator, str | None], int]  # search.policy.InFlightKey -> count

# A gain this small is a tie: a column that copies another moves a model's float sums by
# about 1e-10, which is not a better model.
TIE = 1e-9
# The gate's fresh pairs, each a (split, seed): the reference configuration fitted with `seed`
# with and without the program on every fold of `split` (0: the run's own folds; 1, 2: the same
# rows shuffled into as many folds again, engine/evaluation/folds.py; on the holdout, random
# groups of its valid rows). Never seed 0, the one every trial fits with. Five folds of one
# split could not tell known-good programs from chance; three splits could, at this rule's
# rate of chance keeps (benchmarks/results/gate-power-2026-12-06).
GATE_PAIRS = ((0, 1), (0, 2), (1, 3), (1, 4), (2, 5), (2, 6))
# A program is kept when the mean of its (split, fold) gains is above zero by a one-sided
# paired t test at this level. The groups overlap (three splits of the same rows), so the test
# keeps more chance programs than its level says: at 0.05 it kept 7 of 106 noise programs, at
# 0.02 5 (and 18 of 26 expert programs that help, by a truth of 20 resplits, against 20)
# (benchmarks/results/gate-power-2026-12-07).
KEEP_ALPHA = 0.02


def gate_pairs(seeded: bool) -> tuple[tuple[int, int], ...]:
    """The pairs a reference configuration is judged on: a family without a seed fits the
    same model with every seed, so one pair a split."""
    if seeded:
        return GATE_PAIRS
    first: dict[int, tuple[int, int]] = {}
    for split, seed in GATE_PAIRS:
        first.setdefault(split, (split, seed))
    return tuple(first.values())


# What a program rejected before any model ran says first (its node is buggy, its error this).
REJECTED = "feature program rejected:"
# Feature programs in a row that were not kept after which the LLM is asked for no more
# (RunConfig.llm_patience's default), so that its CPUs run the floor's trials instead; keeps
# came early or not at all (benchmarks/results/llm-gain-2026-11-29).
PATIENCE = 10
# From this many scored programs on, the LLM is also asked for no more once its programs are
# better than their reference (by the mean over the groups) no more often than coin tosses
# would be: the one-sided sign test's p above RECORD_ALPHA. Patience reads only the keeps, which
# chance also makes now and then; this rule stopped runs at chance by their 8th program and
# none better than chance (benchmarks/results/llm-gain-2026-12-03b).
RECORD_FROM = 8
RECORD_ALPHA = 0.2
# Feature programs may take at most this share of the executors' seconds spent so far; past
# it the LLM is asked for none until the floor's trials catch up: a program's runs fit its
# reference configuration many times, and without a cap they starved the floor's trials
# (benchmarks/results/llm-gain-2026-12-03).
PROGRAM_SHARE = 0.5
# Each feature program refused in a row widens the next one's sampling by this much, up to
# the ceiling (program_temperature).
REFUSED_STEP = 0.15
REFUSED_CEILING = 1.2
# What the LLM writes (RunConfig.llm_writes, resolved): feature programs, whole model code
# (drafts, improvements, fixes: SCRIPT_STEPS), or both in turn.
WRITES = ("features", "scripts", "both")
SCRIPT_STEPS = frozenset({Operator.DRAFT, Operator.RECALL, Operator.DEBUG, Operator.IMPROVE})


@dataclass(frozen=True, slots=True)
class Gate:
    """A features node's comparison with its reference (the same configuration without the
    program, on the same rows); gains are in the normalised metric (higher is better)."""

    reference: str  # the node paired with: same model, same rows, without this program
    gains: tuple[float, ...]  # with minus without, per group of held-out rows
    kept: bool
    reason: str
    added: tuple[str, ...] = ()  # the columns the program added (or changed)
    # how many fresh pairs (GATE_SEEDS) the gains average; 0: against the reference's own
    # stored predictions, as runs before the fresh pairs were compared
    pairs: int = 0
    # the pairs' sides without the program were kept from an earlier program's run on the
    # same reference configuration and feature set, not fitted in this one
    reused: bool = False
    # each pair's gains, per group (`gains` is their mean); () in runs before `judge`
    seed_gains: tuple[tuple[float, ...], ...] = ()
    # each pair's split (GATE_PAIRS); () in runs before splits, all on the run's folds
    splits: tuple[int, ...] = ()

    @property
    def mean_gain(self) -> float:
        return sum(self.gains) / len(self.gains) if self.gains else 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Gate | None:
        try:
            data = json.loads(text)
            return cls(str(data["reference"]), tuple(float(g) for g in data["gains"]),
                       bool(data["kept"]), str(data["reason"]),
                       tuple(str(c) for c in data.get("added", ())), int(data.get("pairs", 0)),
                       bool(data.get("reused", False)),
                       tuple(tuple(float(g) for g in seed)
                             for seed in data.get("seed_gains", ())),
                       tuple(int(split) for split in data.get("splits", ())))
        except (ValueError, TypeError, KeyError):
            return None


def one_sided_p(values: Sequence[float]) -> float:
    """The one-sided paired t test's p that the values' mean is above zero."""
    from scipy.stats import t as student_t

    mean = statistics.fmean(values)
    sd = statistics.stdev(values)
    if sd == 0:
        return 0.0 if mean > TIE else 1.0
    return float(student_t.sf(mean / (sd / math.sqrt(len(values))), len(values) - 1))


def keep_rule(gains: Sequence[float]) -> tuple[bool, str]:
    """Whether a program whose gains per group of rows (each split's folds) are `gains` is
    kept, and why, in words."""
    finite = [g for g in gains if math.isfinite(g)]
    if len(finite) < 2 or len(finite) < len(gains):  # one group tells nothing from noise
        return False, "no comparable score on every group of rows"
    better = sum(g > TIE for g in finite)
    mean = statistics.fmean(finite)
    p = one_sided_p(finite)
    tally = f"better on {better} of {len(finite)} groups, mean gain {mean:+.4g}, p {p:.3f}"
    if mean > TIE and p < KEEP_ALPHA:
        return True, f"kept: {tally}"
    return False, f"not kept: {tally} (needs p < {KEEP_ALPHA:g})"


def split_means(seed_gains: Sequence[Sequence[float]], splits: Sequence[int]) -> tuple[float, ...]:
    """Each (split, group)'s gain: the mean over that split's pairs, splits in order."""
    out: list[float] = []
    for split in dict.fromkeys(splits):
        pairs = [gains for gains, s in zip(seed_gains, splits, strict=True) if s == split]
        out += [statistics.fmean(group) for group in zip(*pairs, strict=True)]
    return tuple(out)


def judge(reference: str, added: tuple[str, ...], seed_gains: Sequence[Sequence[float]],
          reused: bool, splits: Sequence[int] = ()) -> Gate:
    """The gate of a program from its pairs' gains (one tuple per pair, per group of its
    split; `splits`: each pair's, all the run's folds when not given): kept or not by
    `keep_rule` on each (split, group)'s mean over its pairs."""
    per_pair = tuple(tuple(float(g) for g in pair) for pair in seed_gains)
    splits = tuple(splits) or (0,) * len(per_pair)
    gains = split_means(per_pair, splits)
    return Gate(reference, gains, *keep_rule(gains), added, len(per_pair), reused, per_pair,
                splits)


def screen(reference: str, added: tuple[str, ...], seed_gains: Sequence[Sequence[float]],
           reused: bool, splits: Sequence[int] = ()) -> Gate | None:
    """None when the program's first pair earns it the others (its mean gain is above zero:
    a program that changes nothing stops here about one time in two); else its gate, not
    kept. Screening so kept every known-good program the full rule kept
    (benchmarks/results/gate-power-2026-12-06)."""
    gate = judge(reference, added, seed_gains, reused, splits)
    finite = [g for g in gate.gains if math.isfinite(g)]
    if 1 < len(finite) == len(gate.gains) and gate.mean_gain > TIE:
        return None
    return replace(gate, kept=False, reason=(
        f"not kept: mean gain {gate.mean_gain:+.4g} over {len(gate.gains)} groups with its "
        "first pair (the other pairs run only for a gain)"))


def gate_of(node: Node) -> Gate | None:
    """The gate of a features node that ran and was compared; None for any other node."""
    if node.operator is not Operator.FEATURES or not node.gate:
        return None
    return Gate.from_json(node.gate)


def is_kept(node: Node) -> bool:
    gate = gate_of(node)
    return gate is not None and gate.kept and node.is_ok


def kept_programs(journal: Journal) -> list[Node]:
    """The kept feature programs (each a feature set), best first."""
    kept = [n for n in journal.nodes_of(Operator.FEATURES) if is_kept(n)]
    return sorted(kept, key=lambda n: (-(n.metric or 0.0), n.step))


def best_feature_set(journal: Journal) -> str:
    """The feature set the floor trains on now: the best kept program's, "" for none."""
    kept = kept_programs(journal)
    return kept[0].node_id if kept else ""


def is_question(node: Node) -> bool:
    """A features node that asked the LLM a text column's kind (operators/column_kinds.py)
    rather than for a program of its own: its answer is not the LLM's idea of a feature, so
    neither its patience nor its sampling counts it."""
    return bool(Proposal.from_hint(node.operator, node.parent_id, 0.0, node.hint).column)


def sign_test(better: int, scored: int) -> float:
    """One-sided sign test: the chance that `scored` coin tosses give at least `better` heads."""
    return sum(math.comb(scored, k) for k in range(better, scored + 1)) / 2 ** scored


def programs_spent(journal: Journal, patience: int) -> str:
    """Why the LLM's programs stopped paying, in words, or "" while they may yet: the last
    `patience` feature programs that finished were all not kept (refused, failed or scored
    below the rule), or from the RECORD_FROM-th scored program on, the scored ones were better
    than their reference no more often than chance. Never with patience 0."""
    if patience <= 0:  # asked on every dispatch of the loop: a run without the rule reads nothing
        return ""
    finished = [n for n in journal.nodes_of(Operator.FEATURES)
                if n.status is not Status.LOST and not is_question(n)]
    if patience <= len(finished) and not any(map(is_kept, finished[-patience:])):
        return f"{patience} feature programs in a row were not kept"
    gates = [g for g in map(gate_of, finished) if g is not None]
    better = sum(g.mean_gain > TIE for g in gates)
    if len(gates) >= RECORD_FROM and (p := sign_test(better, len(gates))) > RECORD_ALPHA:
        return (f"{better} of {len(gates)} scored feature programs were better than their "
                f"reference, as coin tosses would be (sign test p {p:.2f})")
    return ""


def programs_over_share(journal: Journal, share: float) -> bool:
    """Whether the feature programs that finished took more than `share` of the executor
    seconds of every finished node: the LLM waits while they did. Never with a share of 1."""
    if share >= 1:
        return False
    programs = sum(n.exec_seconds for n in journal.nodes_of(Operator.FEATURES))
    return programs > share * sum(n.exec_seconds for n in journal)


def program_temperature(journal: Journal, base: float) -> float:
    """The sampling temperature of the next feature program: `base`, widened by each program
    in a row refused on its text, as `greedy.debug_temperature` widens a debug's. The prompt
    lists each refusal, yet at one temperature the model wrote one refused column 5 times in a
    row, each refusal counting against `llm_patience` with no new idea tried."""
    refused = 0
    for node in reversed(journal.nodes_of(Operator.FEATURES)):
        if node.status is Status.LOST or is_question(node):
            continue
        if not node.error.startswith(REJECTED):
            break
        refused += 1
    return min(REFUSED_CEILING, base + REFUSED_STEP * refused)


def programs_turn(journal: Journal, in_flight: InFlight) -> bool:
    """With both kinds of work, a feature program's turn: no more of them so far (finished
    and in flight) than of whole-script steps."""
    def count(operators: frozenset[Operator]) -> int:
        done = sum(len(journal.nodes_of(op)) for op in operators)
        return done + sum(k for (op, _), k in in_flight.items() if op in operators)

    return count(frozenset({Operator.FEATURES})) <= count(SCRIPT_STEPS)


@dataclass(frozen=True, slots=True)
class ProgramCounts:
    """What became of a run's feature programs."""

    proposed: int = 0  # features nodes that finished (lost ones are proposed again)
    rejected: int = 0  # refused by the checks before any model ran
    failed: int = 0  # passed the checks, then did not run or score
    scored: int = 0  # compared with their reference
    kept: int = 0
    llm_seconds: tuple[float, ...] = ()  # each finished program's reply seconds
    exec_seconds: float = 0.0  # the executors' seconds on the programs' runs

    @property
    def median_llm_seconds(self) -> float | None:
        return statistics.median(self.llm_seconds) if self.llm_seconds else None


def program_counts(nodes: Iterable[Node]) -> ProgramCounts:
    programs = [n for n in nodes
                if n.operator is Operator.FEATURES and n.status is not Status.LOST]
    rejected = sum(n.error.startswith(REJECTED) for n in programs)
    scored = sum(gate_of(n) is not None for n in programs)
    return ProgramCounts(
        proposed=len(programs), rejected=rejected,
        failed=len(programs) - rejected - scored, scored=scored,
        kept=sum(is_kept(n) for n in programs),
        llm_seconds=tuple(n.llm_seconds for n in programs),
        exec_seconds=sum(n.exec_seconds for n in programs))


@dataclass(frozen=True)
class AnswerPrograms:
    """The feature programs an answer's predictions come from. `kept`: the kept programs its
    members train on (`trained_on`), in order, each once. `not_kept`: members
    that are themselves a program's node that was not kept (ensemble selection may pick one
    as it may any scored model, and often does),
    with `not_kept_share` their part of the weight."""

    kept: tuple[str, ...]
    not_kept: tuple[str, ...]
    not_kept_share: float


def trained_on(node: Node) -> str:
    """The kept feature set `node` trains on ("" for the task's own columns): its own, or for
    a program that was not kept, the set it was proposed on (its parent), which its columns
    extend all the same."""
    if node.operator is Operator.FEATURES and not is_kept(node):
        return node.parent_id or ""
    return node.feature_set


def answer_programs(journal: Journal, weights: Mapping[str, int]) -> AnswerPrograms:
    """What `weights` (an answer's members and their weights:
    `operators.kinds.ensemble.member_weights`) hold of feature programs."""
    members = [journal.get(i) for i in weights if i in journal]
    kept = [trained_on(m) for m in members]
    not_kept = [m.node_id for m in members
                if m.operator is Operator.FEATURES and gate_of(m) is not None
                and not is_kept(m)]
    total = sum(weights.values())
    return AnswerPrograms(
        tuple(s for s in dict.fromkeys(kept) if s in journal and is_kept(journal.get(s))),
        tuple(not_kept), sum(weights[i] for i in not_kept) / total if total else 0.0)
