"""A feature program's gate on the held-out rows: the reference configuration with the program
against the same configuration without it, group by group.

Both sides are fitted afresh in the program's own runs (operators/models.py `gate_part`): for
each (split, seed) pair of `search.programs.gate_pairs`, the configuration with and without the
program on every fold of the split, so the two differ only by the program (the first pair in
the program's run, the others in a second run for a program that pair found promising:
`search.programs.screen`). The reference's own stored predictions are not the other side: the
reference is the best of the floor's trials, and part of why it is best is its seed's luck,
which no other fit shares. The groups are each split's folds (`Folds.gate_groups`; on the
holdout, random groups of the valid rows), each (split, group)'s gain is the mean over that
split's pairs, and `search.programs.keep_rule` decides (`search.programs.judge`). The side
without the program depends only on the reference configuration, its feature set and the
pair: the search keeps it from the first program's run on them, and later programs there fit
the side with the program alone. A step holds its program's gate in progress as a
`ProgramGate`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from engine.evaluation.folds import Folds
from engine.evaluation.scoring import SubmissionError, read_stacked, submission_metric
from engine.task.prepare import PreparedTask
from sandbox import ExecResult
from search.node import Status
from search.programs import Gate, judge, screen


def group_gains(task: PreparedTask, truth: pd.Series, with_program: pd.DataFrame,
                without: pd.DataFrame, groups: np.ndarray) -> list[float]:
    """Normalised metric with minus without, per group (rows in `held_out` order)."""
    truth = truth.reset_index(drop=True)
    gains = []
    for group in np.unique(groups):
        rows = np.flatnonzero(groups == group)
        scores = [task.metric.normalise(submission_metric(
            task, frame.iloc[rows].reset_index(drop=True), truth.iloc[rows]))
            for frame in (with_program, without)]
        gains.append(scores[0] - scores[1])
    return gains


def fresh_sides(task: PreparedTask, gate_csv: bytes,
                rows: int) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """The held-out predictions in submission/gate.csv with the program and without it, seed by
    seed (block 2 i with the program, 2 i + 1 without; a run that fitted the side with the
    program alone wrote the even blocks only, and its second list is empty)."""
    try:
        blocks = sorted(int(n) for n in
                        pd.read_csv(io.BytesIO(gate_csv), usecols=["fold"])["fold"].unique())
    except (ValueError, pd.errors.ParserError) as exc:
        raise SubmissionError(f"submission/gate.csv is unreadable: {exc}") from exc
    pairs = blocks == list(range(len(blocks))) and len(blocks) % 2 == 0
    if not blocks or not (pairs or blocks == list(range(0, 2 * len(blocks), 2))):
        raise SubmissionError(f"submission/gate.csv holds blocks {blocks}; expected pairs "
                              "(0, 1, 2, 3, ...) or the sides with the program (0, 2, ...)")
    frames = read_stacked(task, gate_csv, "valid", rows, len(blocks))
    if pairs:
        return frames[0::2], frames[1::2]
    return frames, []


def fresh_pairs(task: PreparedTask, gate_csv: bytes,
                rows: int) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """The (with, without) held-out predictions of each seed in submission/gate.csv, which
    must hold both sides."""
    with_program, without = fresh_sides(task, gate_csv, rows)
    if len(without) != len(with_program):
        raise SubmissionError("submission/gate.csv holds no side without the program; "
                              "expected pairs")
    return list(zip(with_program, without, strict=True))


@dataclass(frozen=True)
class GateRound:
    """What one run of a program gave its gate: each pair's gains per group (one tuple per
    seed), the sides without the program it compared with (to keep for the next program on
    the same reference and feature set), whether those were kept from an earlier run, and
    what went wrong instead ("" when nothing did)."""

    seed_gains: tuple[tuple[float, ...], ...] = ()
    without: tuple[pd.DataFrame, ...] = ()
    reused: bool = False
    problem: str = ""

    def unjudged(self, reference: str, added: tuple[str, ...]) -> Gate:
        """The gate of a program whose run gave no pairs to judge (`problem`): not kept."""
        return Gate(reference, (), False, f"not kept: {self.problem}", added)


def gate_round(task: PreparedTask, folds: Folds, truth: pd.Series, gate_csv: bytes | None,
               kept_without: Sequence[pd.DataFrame] = (),
               splits: Sequence[int] = (0,)) -> GateRound:
    """The pairs a program's run wrote to `gate_csv` (`truth`: the held-out rows' labels; each
    pair fitted on the folds of its split in `splits`), against `kept_without` (sides kept
    from an earlier program's run) for a run that fitted the sides with the program alone."""
    if gate_csv is None:
        return GateRound(problem="its run wrote no fresh pairs")
    try:
        with_program, without = fresh_sides(task, gate_csv, len(truth))
    except SubmissionError as exc:
        return GateRound(problem=str(exc))
    reused = not without
    without = without or list(kept_without)
    if len(without) != len(with_program) or len(with_program) != len(splits):
        return GateRound(problem=f"submission/gate.csv holds {len(with_program)} sides with the "
                         f"program against {len(without)} without it; expected "
                         f"{len(splits)} pairs")
    gains = tuple(tuple(group_gains(task, truth, w, wo, folds.gate_groups(split)))
                  for w, wo, split in zip(with_program, without, splits, strict=True))
    return GateRound(gains, tuple(without), reused)



class ProgramGate:
    """One feature program's gate in progress, held by its step: its first run's pair, judged
    or screened for a second pair (search.programs.screen), then that pair's run; `gate` is
    the Gate's JSON once decided ("" before). `kept` are the sides without the program the
    search kept from an earlier program on the same reference configuration and feature set
    (then its runs fit the sides with the program alone); `keep` hands the search the sides
    this program fitted, for the next one."""

    def __init__(self, task: PreparedTask, folds: Folds, truth: pd.Series, reference: str,
                 kept: Sequence[pd.DataFrame] | None, second_pair: tuple[str, str] | tuple[()],
                 keep: Callable[[list[pd.DataFrame]], None], splits: Sequence[int]) -> None:
        self.task, self.folds, self.truth = task, folds, truth
        self.reference = reference  # the node it pairs with
        self.kept = list(kept or [])
        self.second_pair = second_pair  # its code fitting the pairs after the first
        self.splits = tuple(splits)  # each pair's split, the first run's pair first
        self.keep = keep
        self.added: tuple[str, ...] = ()  # the columns the program added
        self.first = GateRound()  # what its first run gave the gate
        self.gate = ""

    def first_pair(self, gate_csv: bytes | None, added: tuple[str, ...]) -> str:
        """Gate the program on its first run's pair; the code of its second pair's run when
        that pair is to run first, else "" (the gate is decided)."""
        self.added = added
        pairs = gate_round(self.task, self.folds, self.truth, gate_csv, self.kept[:1],
                           self.splits[:1])
        if pairs.problem:
            self.gate = pairs.unjudged(self.reference, added).to_json()
            return ""
        if not self.kept:
            self.keep(list(pairs.without))
        if self.second_pair:
            screened = screen(self.reference, added, pairs.seed_gains, pairs.reused,
                              self.splits[:1])
            if screened is None:
                self.first = pairs
                both, alone = self.second_pair
                return alone if len(self.kept) > 1 else both
            self.gate = screened.to_json()
        else:
            self.gate = judge(self.reference, added, pairs.seed_gains, pairs.reused,
                              self.splits[:1]).to_json()
        return ""

    def second_pair_ran(self, result: ExecResult) -> None:
        """Its second run (the pairs after the first) ended: the gate on every pair."""
        if result.status != Status.OK.value:
            why = result.error or result.stderr_tail[-300:]
            self.first_pair_only(f"its second pair's run ended {result.status}: {why}")
            return
        pairs = gate_round(self.task, self.folds, self.truth, result.gate_csv, self.kept[1:],
                           self.splits[1:])
        if pairs.problem:
            self.first_pair_only(pairs.problem)
            return
        first = self.first
        if len(self.kept) < 2:
            self.keep([*first.without, *pairs.without])
        self.gate = judge(self.reference, self.added, first.seed_gains + pairs.seed_gains,
                          first.reused and pairs.reused, self.splits).to_json()

    def first_pair_only(self, why: str) -> None:
        """The gate of a program whose second pair gave no gains (`why`): not kept, its first
        pair's gains recorded."""
        gate = judge(self.reference, self.added, self.first.seed_gains, self.first.reused,
                     self.splits[:1])
        self.gate = replace(gate, kept=False, reason=f"not kept: {why}").to_json()
