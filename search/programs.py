"""Feature programs in the search: the gate's record on a node, the rule that keeps a program,
and what a report counts of them.

A feature program is one LLM-written function, `add_features(df) -> df`, that adds columns from
a row's own columns. The engine runs the floor's best configuration with it (on the chain of
programs already kept under it) and compares that with the same configuration without it on the
same held-out rows: the gain on each group of rows (the run's folds; on the holdout, fixed
random groups of the valid rows) decides, by one rule (`keep_rule`), whether it is kept. A kept
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

InFlight = Mapping[tuple[Operator, str | None], int]  # search.policy.InFlightKey -> count

# A program is kept only when it is better on every group of rows (so on average too). A
# program that changes nothing passes that by chance about one time in 32 with 5 folds; the
# rule before (`827264c` to `d0ad860`: 4 of 5 and a positive mean) passed it about one time in
# six, so of ten programs that change nothing a run kept one or two, and the floor's trials
# and the answer then trained on them. In issue 42's sixteenth and seventeenth measurements (the
# first made after that rule was chosen; benchmarks/results/llm-gain-2026-12-04/program-gates.md)
# the 6 kept programs better on every group all improved their reference's test score (median
# +7.2 %), the 13 kept with one group not better 3 times (23 %, median -0.17 %), fewer than the
# programs not kept (45 %); credit-g's fold 1 kept `duration / age` on 4 of 5 in both, -1.0 % on
# its test rows both times. This rule was chosen on those runs: the eighteenth measurement is
# its check. (Earlier, the ninth to eleventh measurements' 53 programs passing 4 of 5 improved
# test 40 times, not split this way; a paired t test on top, `702ee11`, refused 11 programs
# that all improved test and was dropped.)
# A gain this small is a tie: a column that copies another moves a model's float sums by
# about 1e-10, which is not a better model.
TIE = 1e-9
# The seeds of a program's fresh pairs: its run also fits the reference configuration with
# and without the program with the first, a second run with the others (see SCREEN_MISSES;
# never 0, the seed every trial fits with), and the gate compares those
# (engine/evaluation/program_gate.py).
GATE_SEEDS = (1, 2)
# The gate fits its pairs in two rounds: the first seed's pair, and the other seeds' only for
# a program whose first pair was better on every group but at most SCREEN_MISSES (`screen`). A
# program's run fits the reference configuration 5 times a fold with both pairs (its own fit,
# and each seed's with and without the program), about five of the floor's trials: on
# credit-g's fold 1 of issue 42's eighteenth measurement, 11 programs took 284 s of the
# executors, none was kept, and the floor's trials got 815 s to the floor arm's 1,115. A
# program that changes nothing passes the first round about one time in five (6 of the 32
# sign patterns of 5 groups) and then stops at 3 fits a fold.
SCREEN_MISSES = 1
# What a program rejected before any model ran says first (its node is buggy, its error this).
REJECTED = "feature program rejected:"
# Feature programs in a row that were not kept after which the LLM is asked for no more
# (RunConfig.llm_patience's default), so that its CPUs run the floor's trials instead. In the
# second fold of issue 42's runs the keeps were programs 2, 4, 7 and 38 of one task and 11 of
# another; four tasks kept none of their 40 to 47 (benchmarks/results/llm-gain-2026-11-29).
PATIENCE = 10
# From this many scored programs on, the LLM is also asked for no more once its programs are
# better than their reference (by the mean over the groups) no more often than coin tosses
# would be: the one-sided sign test's p above RECORD_ALPHA. Patience reads only the keeps, and
# the gate keeps about one program in six that changes nothing, so on a record of chance it
# retired the LLM after about 31 programs, by luck. Over the 203 programs of issue 42's 14th
# and 15th measurements (benchmarks/results/llm-gain-2026-12-03b/gate_record.py), this rule
# stops the ten runs at chance at their 8th program (89 to 252 s) and neither of the two
# better than chance (21 of 27 and 23 of 31 better); it was chosen on those same runs.
RECORD_FROM = 8
RECORD_ALPHA = 0.2
# Feature programs may take at most this share of the executors' seconds spent so far; past
# it the LLM is asked for none until the floor's trials catch up. A program's runs fit the
# reference configuration up to five times on every fold, and programs kept now and then keep the
# LLM asking: on credit-g's fold 1 in issue 42's fourteenth measurement, 39 programs took
# 471 s of the executors and the floor's trials 79 s (17 trials, to the floor arm's 326).
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
                             for seed in data.get("seed_gains", ())))
        except (ValueError, TypeError, KeyError):
            return None


def keep_rule(gains: Sequence[float]) -> tuple[bool, str]:
    """Whether a program whose per-group gains are `gains` is kept, and why, in words."""
    finite = [g for g in gains if math.isfinite(g)]
    if not finite or len(finite) < len(gains):
        return False, "no comparable score on every group of rows"
    better = sum(g > TIE for g in finite)
    mean = sum(finite) / len(finite)
    tally = f"better on {better} of {len(finite)} groups, mean gain {mean:+.4g}"
    if better == len(finite) and len(finite) > 1:  # one group tells nothing from noise
        return True, f"kept: {tally}"
    groups = max(len(finite), 2)
    return False, f"not kept: {tally} (needs every group better: {groups} of {groups})"


def judge(reference: str, added: tuple[str, ...], seed_gains: Sequence[Sequence[float]],
          reused: bool) -> Gate:
    """The gate of a program from its pairs' gains (one tuple per seed, per group): kept or
    not by `keep_rule` on their mean over the seeds."""
    per_seed = tuple(tuple(float(g) for g in seed) for seed in seed_gains)
    gains = tuple(statistics.fmean(group) for group in zip(*per_seed, strict=True))
    return Gate(reference, gains, *keep_rule(gains), added, len(per_seed), reused, per_seed)


def screen(reference: str, added: tuple[str, ...], seed_gains: Sequence[Sequence[float]],
           reused: bool) -> Gate | None:
    """None when the program's first pair earns it the next seed's (better on every group but
    at most SCREEN_MISSES); else its gate, not kept."""
    gate = judge(reference, added, seed_gains, reused)
    finite = [g for g in gate.gains if math.isfinite(g)]
    better = sum(g > TIE for g in finite)
    if 1 < len(finite) == len(gate.gains) and better >= len(finite) - SCREEN_MISSES:
        return None
    groups = max(len(gate.gains), 2)
    return replace(gate, kept=False, reason=(
        f"not kept: better on {better} of {len(gate.gains)} groups with its first pair, mean "
        f"gain {gate.mean_gain:+.4g} (a second pair needs {groups - SCREEN_MISSES} of "
        f"{groups}; keeping, every group better)"))


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
    finished = [n for n in journal.nodes_of(Operator.FEATURES) if n.status is not Status.LOST]
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
    lists each refusal, yet at one temperature the model writes the refused program again:
    README command 1 at `1526612` wrote one refused column 5 times in a row, and each
    refusal counts against `llm_patience` with no new idea tried."""
    refused = 0
    for node in reversed(journal.nodes_of(Operator.FEATURES)):
        if node.status is Status.LOST:
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
    as it may any scored model: 9 of 12 LLM answers of issue 42's eleventh measurement did),
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
