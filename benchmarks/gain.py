"""The LLM's gain: a search with the LLM against the same search without it (`benchmarks.run
--floor-arm`), per task, paired by outer fold.

Two spreads say whether a difference is more than noise, and a third gives its scale. Over
several outer folds, the sd of the paired differences: a mean within it is a tie. On one outer
fold there is no such spread, so the answers' test predictions are compared row by row instead:
a 95 % paired bootstrap interval of the gain over the test rows (`answer_gain_interval`), and a
difference is a win or a loss only when that interval leaves out zero. That interval knows the
test rows' noise, not the search's own (another seed may find another answer): it is the
smaller of the two. With several seeds, the floor arm's own sd over seeds on one fold
(`Gain.floor_spread`) is the search's noise itself: what a second run of the same search
without any LLM moves by.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks.run import FLOOR
from benchmarks.stats import mean, paired_interval, same, sd
from benchmarks.table import whole
from engine.evaluation.scoring import read_submission
from engine.evaluation.select import resample_counts, resampled_scores
from engine.records.store import RunStore
from engine.task.prepare import PreparedTask

INTERVAL_RESAMPLES = 2000  # of the test rows, for an interval of one answer's gain over another

Interval = tuple[float, float]
# The interval of the LLM arm's gain over the floor arm from their run folders (None: unknown).
IntervalOf = Callable[[str, str], Interval | None]
# One run of a task's method on one outer fold: its seed, run folder, test score and the
# second it started (None: a row written before the column existed).
Run = tuple[int, str, float, float | None]


@dataclass(frozen=True)
class Gain:
    """One task's search with the LLM against the same search without it (the floor arm),
    paired by outer fold; each fold's score is the mean over its seeds."""

    task: str
    method: str
    with_llm: float  # mean over the paired folds
    without: float
    differences: tuple[float, ...]  # per fold, signed so that above zero the LLM did better
    # per fold, the 95 % interval of its first seed's gain over the test rows (None: unknown)
    intervals: tuple[Interval | None, ...] = ()
    # the most hours between the start of a floor run and of the LLM run paired with it (same
    # fold and seed); None when the rows do not say when they started
    hours_apart: float | None = None
    # the floor arm's sd over its seeds on one fold, the mean over the folds with 2 or more
    # seeds; None with one seed a fold
    floor_spread: float | None = None

    @property
    def mean(self) -> float:
        return mean(list(self.differences))

    @property
    def spread(self) -> float:
        """The sd of the paired differences over folds (0 with one fold)."""
        return sd(list(self.differences))

    @property
    def verdict(self) -> str:
        """won, lost or tied; with one fold and no interval over its test rows, "one fold"
        (nothing to tell noise from a difference)."""
        if same(self.with_llm, self.without):
            return "tied"
        if len(self.differences) > 1:
            if abs(self.mean) <= self.spread:
                return "tied"
            return "won" if self.mean > 0 else "lost"
        interval = self.intervals[0] if self.intervals else None
        if interval is None:
            return "one fold"
        low, high = interval
        return "won" if low > 0 else "lost" if high < 0 else "tied"


def llm_gains(rows: pd.DataFrame, maximize: dict[str, bool],
              interval: IntervalOf | None = None) -> list[Gain]:
    """Per task and search method, its gain over the floor arm on the outer folds both ran;
    `interval(floor_run_dir, llm_run_dir)` gives each fold's interval over its test rows."""
    runs: dict[str, dict[str, dict[int, list[Run]]]] = {}  # task -> method -> fold -> runs
    for row in rows[rows.kind == "policy"].to_dict("records"):
        started = row.get("started_at")
        runs.setdefault(str(row["task"]), {}).setdefault(str(row["method"]), {}).setdefault(
            whole(row.get("fold")), []).append(
                (whole(row.get("seed")), str(row["run_dir"]), float(row["test"]),
                 None if started is None or pd.isna(started) else float(started)))
    gains = []
    for task, methods in runs.items():
        floor = methods.get(FLOOR, {})
        sign = 1.0 if maximize[task] else -1.0
        for method, llm in methods.items():
            folds = sorted(set(llm) & set(floor))
            if method == FLOOR or not folds:
                continue
            with_llm = [mean([r[2] for r in llm[f]]) for f in folds]
            without = [mean([r[2] for r in floor[f]]) for f in folds]
            gains.append(Gain(
                task, method, mean(with_llm), mean(without),
                tuple(sign * (a - b) for a, b in zip(with_llm, without, strict=True)),
                tuple(_first_pair_interval(floor[f], llm[f], interval) for f in folds),
                _hours_apart([p for f in folds for p in _seed_pairs(floor[f], llm[f])]),
                _seed_spread([floor[f] for f in folds])))
    return gains


def _seed_spread(folds: list[list[Run]]) -> float | None:
    """The sd of the test scores over a fold's seeds, the mean over the folds with 2 or more."""
    spreads = [sd([run[2] for run in runs]) for runs in folds if len(runs) > 1]
    return mean(spreads) if spreads else None


def _seed_pairs(floor: list[Run], llm: list[Run]) -> list[tuple[Run, Run]]:
    """The floor run and the LLM run of each seed both arms ran on one fold, lowest seed first."""
    by_seed = {run[0]: run for run in floor}
    return [(by_seed[run[0]], run) for run in sorted(llm) if run[0] in by_seed]


def _first_pair_interval(floor: list[Run], llm: list[Run],
                         interval: IntervalOf | None) -> Interval | None:
    """The interval of the lowest seed both arms ran on this fold."""
    pairs = _seed_pairs(floor, llm)
    return interval(pairs[0][0][1], pairs[0][1][1]) if interval and pairs else None


def _hours_apart(pairs: list[tuple[Run, Run]]) -> float | None:
    """The most hours between the starts of paired runs; None when any start is unknown. A
    machine's pace changes from day to day: the same floor run of credit-g made 505 nodes on
    2026-11-29 and 267 on 2026-12-01, so only pairs run close together compare the LLM alone."""
    gaps = [abs(b[3] - a[3]) for a, b in pairs if a[3] is not None and b[3] is not None]
    return max(gaps) / 3600 if gaps and len(gaps) == len(pairs) else None


def run_interval(floor_run: str, llm_run: str) -> Interval | None:
    """`answer_gain_interval` of two run folders, None when either is gone (a results table
    read without its runs)."""
    if not (Path(floor_run).is_dir() and Path(llm_run).is_dir()):
        return None
    return answer_gain_interval(Path(floor_run), Path(llm_run))


def answer(run_dir: Path) -> tuple[PreparedTask, pd.Series, pd.DataFrame] | None:
    """A run's task, its test labels and its answer's kept test predictions; None when the
    predictions are missing."""
    store = RunStore.open(run_dir)
    task = store.load_task()
    kept = store.read_best("test")
    if kept is None:
        return None
    return task, task.test_y.reset_index(drop=True), read_submission(task, kept, "test")


def answer_gain_interval(off_dir: Path, on_dir: Path) -> Interval | None:
    """95% paired bootstrap interval of the `on` run's test gain over the `off` run's (the
    answers' kept test predictions, scored on the same resampled test rows; positive is
    better); None when either answer's predictions are missing or the runs' test rows differ."""
    off, on = answer(off_dir), answer(on_dir)
    if off is None or on is None or not off[1].equals(on[1]):
        return None
    task, truth, _ = off
    counts = resample_counts(len(truth), INTERVAL_RESAMPLES)
    off_scores, on_scores = (resampled_scores(task, run[2], counts, truth) for run in (off, on))
    return paired_interval(off_scores, on_scores, task.metric.maximize)
