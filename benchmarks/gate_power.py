"""How often does a keep rule keep the expert arm's programs, and the null arm's? (issue 74)

    python -m benchmarks.gate_power [--suite NAMES] [--outer-folds 2] [--repeats 3]
                                    [--max-rows 8000] [--records FILE.jsonl] [--out FILE.md]

Outside the search, on each task's outer folds (`benchmarks.run`'s, split seed 0): every
program of the expert and null arms (`benchmarks.program_arms`) is compared with its absence
the way the engine's gate compares it, with one reference configuration (the floor's
`lgbm_small_lr` portfolio entry: seeded, subsampled, as the floor's best usually is):

- **the gate's view**: `--repeats` shufflings of the dev rows into 5 folds, each fitted with and
  without the program under two model seeds; repeat 0 with seeds 1 and 2 is what today's gate
  sees (the run's folds, `search.programs.GATE_SEEDS`). Each (repeat, seed, fold) gives the
  normalised metric's gain on the fold's rows.
- **the truth**: the configuration fitted on every dev row with and without the program, under
  three seeds the gate never used, scored on the outer fold's test rows: the mean gain.
- **the resplit truth** (`--truth-resplits N`): one outer fold's test rows are a few hundred
  rows on small data, too few to say whether a program helps (its gain's sign there is mostly
  chance). So the whole task (at most twice `--max-rows` rows) is also split into halves N / 2
  times under other seeds, each half the test rows of a fit on the other (as large as a dev
  part of two outer folds): N gains per program. A program **helps** on the task when their
  mean is above zero by the one-sided t test at p < 0.01, **hurts** by the same test below
  zero, and is **unclear** otherwise. The halves overlap from split to split, so the plain
  test's p is too small, hence 0.01; Nadeau and Bengio's correction for that decides nothing
  on these sizes (the table counts its verdicts too). A null program that helps by this truth
  is no null (a hash of a row names the row's duplicates: kc1 repeats 43 % of its rows) and is
  counted apart from the false keeps.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.datasets import Dataset, suite
from benchmarks.program_arms import arm_programs
from benchmarks.run import outer_folds
from common.errors import UserError, error_exit
from common.metric import METRICS
from engine.evaluation.folds import fold_splitter
from engine.evaluation.select import resample_counts
from fileio import write_atomic
from search.families import PORTFOLIO
from search.programs import keep_rule

FOLDS = 5
SEEDS_PER_REPEAT = 2  # the engine's gate fits two seeds' pairs (search.programs.GATE_SEEDS)
TRUTH_SEEDS = (101, 102, 103)
TRUTH_SPLIT_SEED = 1000  # the resplit truth's r-th pair of halves: seed TRUTH_SPLIT_SEED + r
TRUTH_ALPHA = 0.01
REFERENCE = "lgbm_small_lr"
ROW_RESAMPLES = 1000


@dataclass(frozen=True)
class Record:
    """One program on one task's outer fold: its gate gains and its truth."""

    task: str
    fold: int
    arm: str
    index: int  # its place in the arm's list
    program: str
    metric: str
    gains: list[list[list[float]]]  # [repeat][seed][fold], normalised metric with - without
    test_gain: float  # the truth: mean over TRUTH_SEEDS of the test score with - without
    test_reference: float  # the test score without the program (normalised)
    # the paired bootstrap over the dev rows of their held-out predictions, each side's the
    # mean over the seeds of the first 1 (or every) repeat: the share of resamples it wins
    row_shares: dict[str, float] = field(default_factory=dict)
    # the resplit truth: the task's gains over TRUTH_RESPLITS half splits (the same for each
    # fold of a task; [] when not measured)
    truth_gains: list[float] = field(default_factory=list)


# ---- fitting ---------------------------------------------------------------------------------


def _apply(program: str, frame: pd.DataFrame) -> pd.DataFrame:
    namespace: dict[str, object] = {"np": np, "pd": pd}
    exec(program, namespace)  # our own hand-written programs, never an LLM's
    return namespace["add_features"](frame.copy())  # type: ignore[operator]


def _encoded(frame: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    """Text columns as categories with the dev rows' levels (LightGBM's native handling)."""
    out = frame.copy()
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(like[column]):
            levels = sorted(like[column].dropna().astype(str).unique())
            text = out[column].astype(str)
            out[column] = pd.Categorical(text.where(text.isin(levels)), categories=levels)
    return out


def _model(task_type: str, seed: int) -> object:
    import lightgbm as lgb

    params = next(p for name, _, p in PORTFOLIO if name == REFERENCE)
    cls = lgb.LGBMRegressor if task_type == "regression" else lgb.LGBMClassifier
    return cls(**params, subsample_freq=1, random_state=seed, verbose=-1, n_jobs=1)


def _score(metric: str, truth: np.ndarray, predicted: np.ndarray, classes: np.ndarray) -> float:
    """The normalised metric (higher is better) of `predicted` (values, or probabilities with a
    column per class)."""
    from sklearn.metrics import log_loss, roc_auc_score

    if metric == "rmse":
        return -float(np.sqrt(np.mean((truth - predicted) ** 2)))
    if metric == "roc_auc":
        return float(roc_auc_score(truth == classes[1], predicted[:, 1]))
    if metric == "log_loss":
        return -float(log_loss(truth, np.clip(predicted, 1e-15, 1), labels=classes))
    raise ValueError(f"gate_power scores rmse, roc_auc, log_loss; not {metric}")


def _fit_predict(task_type: str, seed: int, x: pd.DataFrame, y: np.ndarray,
                 rows: pd.DataFrame) -> np.ndarray:
    model = _model(task_type, seed)
    model.fit(x, y)  # type: ignore[attr-defined]
    if task_type == "regression":
        return np.asarray(model.predict(rows), dtype=float)  # type: ignore[attr-defined]
    return np.asarray(model.predict_proba(rows), dtype=float)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Scores:
    folds: list[list[list[float]]]  # [repeat][seed][fold] held-out scores
    test: float  # the mean test score over TRUTH_SEEDS
    predictions: list[np.ndarray]  # per repeat, every dev row's held-out, mean over seeds


class Fits:
    """The reference configuration's fits on one task's outer fold, with any program's columns;
    the side without a program is fitted once and shared by every program."""

    def __init__(self, dataset: Dataset, fold: int, outer: int, repeats: int,
                 max_rows: int) -> None:
        frame = pd.read_csv(dataset.path)
        target = frame[dataset.target]
        labels = target.astype(str).tolist()
        test_rows = outer_folds(labels, dataset.task_type, outer, 0)[fold]
        is_test = np.zeros(len(frame), dtype=bool)
        is_test[test_rows] = True
        dev = frame[~is_test].reset_index(drop=True)
        if len(dev) > max_rows:
            dev = dev.sample(max_rows, random_state=0).reset_index(drop=True)
        self.task_type = dataset.task_type
        self.metric = dataset.amlb_metric
        self.dev_x = dev.drop(columns=dataset.target)
        self.test_x = frame[is_test].drop(columns=dataset.target).reset_index(drop=True)
        y_dev, y_test = dev[dataset.target], frame[is_test][dataset.target]
        if self.task_type == "regression":
            self.y_dev, self.y_test = y_dev.to_numpy(float), y_test.to_numpy(float)
            self.classes = np.array([])
        else:
            self.y_dev = y_dev.astype(str).to_numpy()
            self.y_test = y_test.astype(str).to_numpy()
            self.classes = np.array(sorted(set(self.y_dev)))
        self.splits = [list(fold_splitter(self.task_type, FOLDS, r).split(
            np.zeros(len(dev)), self.y_dev)) for r in range(repeats)]
        self.numeric = [c for c in self.dev_x.columns
                        if pd.api.types.is_numeric_dtype(self.dev_x[c])]
        self._without: Scores | None = None
        self._counts: np.ndarray | None = None

    def _seeds(self, repeat: int) -> tuple[int, ...]:
        return tuple(1 + SEEDS_PER_REPEAT * repeat + s for s in range(SEEDS_PER_REPEAT))

    def scores(self, program: str | None) -> Scores:
        """[repeat][seed][fold] held-out scores, the mean test score over TRUTH_SEEDS, and
        each repeat's held-out predictions of every dev row, the mean over its seeds."""
        dev = _apply(program, self.dev_x) if program else self.dev_x
        test = _apply(program, self.test_x) if program else self.test_x
        dev, test = _encoded(dev, dev), _encoded(test, dev)
        folds, predictions = [], []
        for repeat, splits in enumerate(self.splits):
            per_seed, held_out = [], []
            for seed in self._seeds(repeat):
                oof: np.ndarray | None = None
                scores = []
                for fit, held in splits:
                    predicted = _fit_predict(self.task_type, seed, dev.iloc[fit],
                                             self.y_dev[fit], dev.iloc[held])
                    if oof is None:
                        oof = np.zeros((len(dev), *predicted.shape[1:]))
                    oof[held] = predicted
                    scores.append(_score(self.metric, self.y_dev[held], predicted,
                                         self.classes))
                assert oof is not None  # FOLDS folds, each predicted
                per_seed.append(scores)
                held_out.append(oof)
            folds.append(per_seed)
            predictions.append(np.mean(held_out, axis=0))
        truth = statistics.fmean(
            _score(self.metric, self.y_test,
                   _fit_predict(self.task_type, seed, dev, self.y_dev, test), self.classes)
            for seed in TRUTH_SEEDS)
        return Scores(folds, truth, predictions)

    def without(self) -> Scores:
        if self._without is None:
            self._without = self.scores(None)
        return self._without

    def row_share(self, with_program: np.ndarray, without: np.ndarray) -> float:
        """The share of bootstrap resamples of the dev rows on which `with_program`'s held-out
        predictions score better than `without`'s (ties half), by the metric's resampled form
        (common.metric, as the final selection compares answers)."""
        if self._counts is None:
            self._counts = resample_counts(len(self.y_dev), ROW_RESAMPLES)
        spec = METRICS[self.metric]
        sides = []
        for predicted in (with_program, without):
            if self.task_type == "regression":
                labels, proba = predicted, None
            else:
                proba = pd.DataFrame(predicted, columns=list(self.classes))
                labels = self.classes[predicted.argmax(axis=1)]
            sides.append(spec.score_resamples(pd.Series(self.y_dev), pd.Series(labels), proba,
                                              list(self.classes),
                                              self._counts))
        diff = sides[0] - sides[1] if spec.maximize else sides[1] - sides[0]
        return float(np.mean(diff > 0) + 0.5 * np.mean(diff == 0))


def resplit_truth(dataset: Dataset, resplits: int, max_rows: int) -> dict[str, list[float]]:
    """Each program's (by its text) gains (normalised metric, with - without) over `resplits`
    halves of the task's rows, each the test rows of the configuration fitted on the other half
    (seeded per pair of halves, never a seed the gate fits with)."""
    frame = pd.read_csv(dataset.path)
    if len(frame) > 2 * max_rows:
        frame = frame.sample(2 * max_rows, random_state=0).reset_index(drop=True)
    x = frame.drop(columns=dataset.target)
    if dataset.task_type == "regression":
        y = frame[dataset.target].to_numpy(float)
        classes = np.array([])
    else:
        y = frame[dataset.target].astype(str).to_numpy()
        classes = np.array(sorted(set(y)))
    numeric = [c for c in x.columns if pd.api.types.is_numeric_dtype(x[c])]
    programs = [program for arm in ("expert", "null")
                for program in arm_programs(arm, dataset.name, numeric)]
    featured = {program: _apply(program, x) for program in programs}
    halves = [half for pair in range((resplits + 1) // 2) for half in
              fold_splitter(dataset.task_type, 2, TRUTH_SPLIT_SEED + pair).split(x, y)]
    gains: dict[str, list[float]] = {program: [] for program in programs}
    for r, (fit, held) in enumerate(halves[:resplits]):

        def score(frame: pd.DataFrame, fit: np.ndarray = fit, held: np.ndarray = held,
                  seed: int = TRUTH_SPLIT_SEED + r) -> float:
            dev, test = frame.iloc[fit], frame.iloc[held]
            predicted = _fit_predict(dataset.task_type, seed, _encoded(dev, dev), y[fit],
                                     _encoded(test, dev))
            return _score(dataset.amlb_metric, y[held], predicted, classes)

        base = score(x)
        for key, frame in featured.items():
            gains[key].append(score(frame) - base)
    return gains


def truth_verdict(record: Record, correction: float = 0.0) -> str:
    """helps, hurts or unclear by the resplit truth (`correction`: Nadeau and Bengio's, 1.0 for
    halves); "" when it was not measured."""
    gains = record.truth_gains
    if len(gains) < 2:
        return ""
    if _t_p(gains, correction) < TRUTH_ALPHA:
        return "helps"
    if _t_p([-g for g in gains], correction) < TRUTH_ALPHA:
        return "hurts"
    return "unclear"


def with_truth(records: Sequence[Record], resplits: int, max_rows: int) -> list[Record]:
    """`records` with the resplit truth of every task that has none yet (none for a record
    whose program is not the arm's today)."""
    out = list(records)
    for task in dict.fromkeys(r.task for r in records if not r.truth_gains):
        started = time.time()
        truth = resplit_truth(next(iter(suite(task))), resplits, max_rows)
        out = [replace(r, truth_gains=truth.get(r.program, [])) if r.task == task else r
               for r in out]
        print(f"gate_power: {task} resplit truth: {time.time() - started:.0f}s", file=sys.stderr)
    return out


def measure(datasets: Sequence[Dataset], outer: int, repeats: int,
            max_rows: int) -> Iterator[Record]:
    for dataset in datasets:
        for fold in range(outer):
            started = time.time()
            fits = Fits(dataset, fold, outer, repeats, max_rows)
            base = fits.without()
            for arm in ("expert", "null"):
                for index, program in enumerate(arm_programs(arm, dataset.name, fits.numeric)):
                    scores = fits.scores(program)
                    gains = [[[a - b for a, b in zip(ws, wo, strict=True)]
                              for ws, wo in zip(wr, br, strict=True)]
                             for wr, br in zip(scores.folds, base.folds, strict=True)]
                    shares = {f"{r}x{FOLDS}": fits.row_share(
                        np.mean(scores.predictions[:r], axis=0),
                        np.mean(base.predictions[:r], axis=0))
                        for r in sorted({1, min(3, repeats), repeats})}
                    yield Record(dataset.name, fold, arm, index, program, fits.metric, gains,
                                 scores.test - base.test, base.test, shares)
            print(f"gate_power: {dataset.name} fold {fold}: {time.time() - started:.0f}s",
                  file=sys.stderr)


# ---- rules -----------------------------------------------------------------------------------


Gains = Sequence[Sequence[Sequence[float]]]  # [repeat][seed][fold]
Rule = Callable[[Record], bool]


def _fold_means(gains: Gains, repeats: int) -> list[float]:
    """Each (repeat, fold)'s gain, the mean over its seeds, for the first `repeats` repeats."""
    return [statistics.fmean(seeds[s][k] for s in range(len(seeds)))
            for seeds in gains[:repeats] for k in range(len(seeds[0]))]


def _t_p(values: Sequence[float], correction: float = 0.0) -> float:
    """One-sided p of a mean above 0 by Student's t; `correction` adds n_test / n_train to the
    variance's 1 / n (Nadeau and Bengio's for overlapping training sets)."""
    from scipy import stats

    n = len(values)
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    if sd == 0:
        return 0.0 if mean > 0 else 1.0
    t = mean / (sd * math.sqrt(1 / n + correction))
    return float(stats.t.sf(t, n - 1))


def today(gains: Gains) -> bool:
    """The engine's rule before issue 74: the first seed's pair better on all folds but one, then
    the mean of both seeds better on every fold (search.programs.keep_rule)."""
    first = gains[0][0]
    if sum(g > 1e-9 for g in first) < len(first) - 1:
        return False
    return keep_rule(_fold_means(gains, 1))[0]


def t_test(repeats: int, alpha: float, correction: float) -> Callable[[Gains], bool]:
    def rule(gains: Gains) -> bool:
        values = _fold_means(gains, repeats)
        return statistics.fmean(values) > 0 and _t_p(values, correction) < alpha
    return rule


def screened(rule: Callable[[Gains], bool]) -> Callable[[Gains], bool]:
    """`rule` for a program whose first pair (repeat 0, its first seed) gained by the mean: the
    others are fitted only then."""
    return lambda gains: statistics.fmean(gains[0][0]) > 0 and rule(gains)


def extended(first: int, more: int, alpha: float, widen: float) -> Callable[[Gains], bool]:
    """The t test at `alpha` on the first `first` repeats; a program between `alpha` and
    `widen` there is fitted on `more` repeats in all and tested again at `alpha`."""
    def rule(gains: Gains) -> bool:
        values = _fold_means(gains, first)
        if statistics.fmean(values) <= 0 or _t_p(values) >= widen:
            return False
        values = values if _t_p(values) < alpha else _fold_means(gains, more)
        return statistics.fmean(values) > 0 and _t_p(values) < alpha
    return rule


def mean_positive(gains: Gains) -> bool:
    return statistics.fmean(_fold_means(gains, 1)) > 0


def rows_better(repeats: int, share: float) -> Rule:
    def rule(record: Record) -> bool:
        return record.row_shares.get(f"{repeats}x{FOLDS}", 0.0) >= share
    return rule


def _on_gains(rule: Callable[[Gains], bool]) -> Rule:
    return lambda record: rule(record.gains)


RULES: dict[str, Rule] = {
    "today: every fold better (1x5, 2 seeds)": _on_gains(today),
    "mean gain > 0 (1x5, 2 seeds)": _on_gains(mean_positive),
    "t-test p<0.05 (1x5, 2 seeds)": _on_gains(t_test(1, 0.05, 0.0)),
    "t-test p<0.10 (1x5, 2 seeds)": _on_gains(t_test(1, 0.10, 0.0)),
    "t-test p<0.05 (3x5, 2 seeds)": _on_gains(t_test(3, 0.05, 0.0)),
    "t-test p<0.01 (3x5, 2 seeds)": _on_gains(t_test(3, 0.01, 0.0)),
    "t-test p<0.05 (2x5, 2 seeds)": _on_gains(t_test(2, 0.05, 0.0)),
    "first pair's mean > 0, then t-test p<0.05 (3x5, 2 seeds)":
        _on_gains(screened(t_test(3, 0.05, 0.0))),
    "t-test p<0.05 (5x5, 2 seeds)": _on_gains(t_test(5, 0.05, 0.0)),
    "t-test p<0.01 (5x5, 2 seeds)": _on_gains(t_test(5, 0.01, 0.0)),
    "now: first pair's mean > 0, then t-test p<0.02 (3x5, 2 seeds)":
        _on_gains(screened(t_test(3, 0.02, 0.0))),
    "first pair's mean > 0, then t-test p<0.01 (3x5, 2 seeds)":
        _on_gains(screened(t_test(3, 0.01, 0.0))),
    "first pair's mean > 0, then t-test p<0.05 (5x5, 2 seeds)":
        _on_gains(screened(t_test(5, 0.05, 0.0))),
    "first pair's mean > 0, t-test p<0.05 (3x5), between 0.05 and 0.3 again on 5x5":
        _on_gains(screened(extended(3, 5, 0.05, 0.3))),
    "t-test p<0.05 (3x5, 2 seeds, corrected)": _on_gains(t_test(3, 0.05, 1 / (FOLDS - 1))),
    "t-test p<0.10 (3x5, 2 seeds, corrected)": _on_gains(t_test(3, 0.10, 1 / (FOLDS - 1))),
    "rows better in 95 % of resamples (1x5, 2 seeds)": rows_better(1, 0.95),
    "rows better in 99 % of resamples (1x5, 2 seeds)": rows_better(1, 0.99),
    "rows better in 95 % of resamples (3x5, 2 seeds)": rows_better(3, 0.95),
    "rows better in 99 % of resamples (3x5, 2 seeds)": rows_better(3, 0.99),
}


# ---- the table -------------------------------------------------------------------------------


def _interval(k: int, n: int) -> str:
    """A 95 % Wilson interval of k in n, in percent."""
    if n == 0:
        return "-"
    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{100 * max(0.0, centre - half):.0f}-{100 * min(1.0, centre + half):.0f} %"


def _rules(records: Sequence[Record]) -> dict[str, Rule]:
    """The rules that read no more repeats than were fitted, nor row shares not measured."""
    repeats = min(len(r.gains) for r in records)
    shares = set.intersection(*(set(r.row_shares) for r in records))
    return {name: rule for name, rule in RULES.items()
            if not any(f"{r}x{FOLDS}" in name for r in range(repeats + 1, 10))
            and (not name.startswith("rows better") or any(f"({k}," in name for k in shares))}


def table(records: Sequence[Record]) -> str:
    repeats = min(len(r.gains) for r in records)
    nulls = [r for r in records if r.arm == "null"]
    experts = [r for r in records if r.arm == "expert"]
    helped = [r for r in experts if r.test_gain > 0]
    lines = [f"{len(nulls)} null and {len(experts)} expert programs ({len(helped)} helped on "
             f"the test rows), {len({(r.task, r.fold) for r in records})} task folds, "
             f"{repeats} repeats of {FOLDS} folds fitted", "",
             "| rule | null kept | 95 % interval | expert kept that helped test | "
             "expert kept that did not |", "|---|---|---|---|---|"]
    rules = _rules(records)
    for name, rule in rules.items():
        false = sum(rule(r) for r in nulls)
        good = sum(rule(r) for r in helped)
        bad = sum(rule(r) for r in experts if r.test_gain <= 0)
        lines.append(f"| {name} | {false} / {len(nulls)} | {_interval(false, len(nulls))} | "
                     f"{good} / {len(helped)} | {bad} / {len(experts) - len(helped)} |")
    lines += ["", "Per task (expert programs: helped test / kept by each rule, in the order "
              "above):", ""]
    for task in sorted({r.task for r in records}):
        mine = [r for r in experts if r.task == task]
        kept = [str(sum(rule(r) for r in mine if r.test_gain > 0))
                for rule in rules.values()]
        nkept = [str(sum(rule(r) for r in nulls if r.task == task))
                 for rule in rules.values()]
        lines.append(f"- {task}: {sum(r.test_gain > 0 for r in mine)} of {len(mine)} expert "
                     f"programs helped test; kept of those {', '.join(kept)}; "
                     f"nulls kept {', '.join(nkept)}")
    if all(r.truth_gains for r in records):
        lines += ["", *truth_table(records, rules)]
    return "\n".join(lines) + "\n"


def truth_table(records: Sequence[Record], rules: dict[str, Rule]) -> list[str]:
    """The rules' keeps by the resplit truth's verdicts: expert programs that help, are unclear
    or hurt, and null programs apart from those the truth says help."""
    resplits = min(len(r.truth_gains) for r in records)
    verdicts = {id(r): truth_verdict(r) for r in records}
    corrected = [truth_verdict(r, correction=1.0) for r in records]
    nulls = [r for r in records if r.arm == "null" and verdicts[id(r)] != "helps"]
    not_null = sorted({f"{r.task} {r.program.split(chr(34))[1]}" for r in records
                       if r.arm == "null" and verdicts[id(r)] == "helps"})
    experts = {v: [r for r in records if r.arm == "expert" and verdicts[id(r)] == v]
               for v in ("helps", "unclear", "hurts")}
    lines = [f"By the resplit truth ({resplits} halves of each task's rows, t test p < "
             f"{TRUTH_ALPHA:g}), of the expert programs' task folds {len(experts['helps'])} "
             f"help, {len(experts['unclear'])} are unclear and {len(experts['hurts'])} hurt. "
             f"Null programs that help by it, counted apart: {', '.join(not_null) or 'none'}. "
             f"With Nadeau and Bengio's correction, {corrected.count('helps')} of "
             f"{len(records)} programs' task folds help and {corrected.count('hurts')} hurt.",
             "", "| rule | null kept | 95 % interval | expert kept that help | unclear kept | "
             "hurt kept |", "|---|---|---|---|---|---|"]
    for name, rule in rules.items():
        false = sum(rule(r) for r in nulls)
        kept = {v: sum(rule(r) for r in group) for v, group in experts.items()}
        lines.append(f"| {name} | {false} / {len(nulls)} | {_interval(false, len(nulls))} | "
                     + " | ".join(f"{kept[v]} / {len(experts[v])}" for v in experts) + " |")
    lines += ["", "Per task (expert programs' task folds that help by the resplit truth / kept "
              "by each rule, in the order above):", ""]
    for task in sorted({r.task for r in records}):
        mine = [r for r in experts["helps"] if r.task == task]
        every = [r for r in records if r.task == task and r.arm == "expert"]
        counts = [str(sum(rule(r) for r in mine)) for rule in rules.values()]
        lines.append(f"- {task}: {len(mine)} of {len(every)} help; kept of those "
                     f"{', '.join(counts)}")
    return lines


def _read(path: Path) -> list[Record]:
    return [Record(**json.loads(line)) for line in path.read_text().splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gate_power",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="lite", help="a suite or comma-separated tasks")
    p.add_argument("--outer-folds", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="shufflings of the dev rows into folds")
    p.add_argument("--max-rows", type=int, default=8000, help="dev rows at most (subsampled)")
    p.add_argument("--records", type=Path, help="JSON lines of every program's gains: read "
                                                "back when it exists, else written")
    p.add_argument("--truth-resplits", type=int, default=20,
                   help="halves of each task's rows the resplit truth fits (0: none); a "
                        "--records file without it gets it added")
    p.add_argument("--out", type=Path, help="the table as Markdown (default: stdout)")
    args = p.parse_args(argv)
    try:
        if args.records is not None and args.records.is_file():
            records = _read(args.records)
        else:
            records = []
            for record in measure(suite(args.suite), args.outer_folds, args.repeats,
                                  args.max_rows):
                records.append(record)
                if args.records is not None:
                    write_atomic(args.records, "".join(json.dumps(asdict(r)) + "\n"
                                                       for r in records))
        if not records:
            raise UserError("no programs were measured")
        if args.truth_resplits > 1 and not all(r.truth_gains for r in records):
            records = with_truth(records, args.truth_resplits, args.max_rows)
            if args.records is not None:
                write_atomic(args.records, "".join(json.dumps(asdict(r)) + "\n"
                                                   for r in records))
        text = table(records)
    except UserError as exc:
        return error_exit(exc)
    if args.out is not None:
        write_atomic(args.out, text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
