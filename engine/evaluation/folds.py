"""The run's folds: how the rows a search may learn from are cut for cross-validation, fixed per
run and stored with it (`task/folds.json`).

The dev rows are train + valid, in that order (the test split stays hidden from everything the
search sees). Every node is scored out of fold: for fold i its script learns from the dev rows
outside the fold and predicts the fold's rows, which reach it without labels; the predictions of
all folds together (out-of-fold, OOF) are scored on the dev labels in the driver, and the test
predictions are the mean over the fold models. So every dev row is scored once, by a model
that never saw its label, and the answer has learned from every dev row.

How many folds (`fold_count`, `--folds` overrides): 5 up to 20,000 dev rows; above that the
holdout, one fold: learn from train, predict valid, as a search without folds does (the answer
is then refitted on every dev row). A candidate costs k fits plus k process starts: where a fit
is slow, more candidates beat a steadier score, and 8 folds tested no better than 5 on small
data. Measured: benchmarks/results/folds-2026-11-25.

How many rows the search uses (`search_rows`): on the holdout, where the dev rows hold more
cells than the budget can fit many times over, the search learns from a random sample of train
and is scored on a random sample of valid (the rest are OUTSIDE the search), and predicts as
many of the test rows (`search_task`); the answer is refitted on every dev row, or as many as
the budget leaves time for (engine/evaluation/rows.py `refit_rows`), and predicts every test
row.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import pandas as pd
from sklearn.model_selection import KFold, StratifiedKFold

from engine.task.prepare import PreparedTask, csv_bytes
from search.families import Size
from search.programs import GATE_PAIRS

HOLDOUT = 1
OUTSIDE = -2  # the fold of a dev row the search's sample leaves out (see `search_rows`)
FOLD_ROWS = ((20_000, 5),)  # (dev rows at most, folds); above: the holdout
FOLDS_FILE = "folds.csv"  # the fold of each dev row, for engine-written code that runs all folds


def fold_count(dev_rows: int, requested: int | None = None) -> int:
    """The number of folds for `dev_rows` rows (see the module docstring)."""
    if requested is not None:
        return requested
    for limit, folds in FOLD_ROWS:
        if dev_rows <= limit:
            return folds
    return HOLDOUT


# Groups the holdout's valid rows are cut into where a comparison needs several (an
# ensemble's cross-fitted score, a feature program's gate).
HOLDOUT_GROUPS = 5


@dataclass(frozen=True, eq=False)
class Folds:
    """`fold_of[r]` is the fold of dev row r; -1 for a row never held out (the train rows of
    the holdout)."""

    k: int
    seed: int
    fold_of: np.ndarray
    # the other splits of the same rows into k folds that a feature program's gate fits its
    # pairs on (search.programs.GATE_PAIRS): split r's fold of each row is gate_of[r - 1];
    # none on the holdout, whose gate groups its valid rows at random instead
    gate_of: tuple[np.ndarray, ...] = ()

    @property
    def held_out(self) -> np.ndarray:
        """Dev rows that get an out-of-fold prediction, in dev order: every row for k-fold, the
        valid rows for the holdout."""
        return np.flatnonzero(self.fold_of >= 0)

    def rows(self, fold: int) -> np.ndarray:
        return np.flatnonzero(self.fold_of == fold)

    def learn_rows(self, fold: int) -> np.ndarray:
        return np.flatnonzero((self.fold_of != fold) & (self.fold_of != OUTSIDE))

    def floor_size(self, test_rows: int, columns: int) -> Size:
        """The Size of one floor node on these folds: a fit per fold, each learning from the
        rows outside its fold and predicting its fold's rows and the test rows."""
        if self.k == HOLDOUT:
            return Size(len(self.learn_rows(0)), len(self.held_out) + test_rows, columns)
        dev = len(self.fold_of)
        return Size(dev * (self.k - 1) // self.k, dev // self.k + test_rows, columns, self.k)

    @property
    def searched(self) -> np.ndarray:
        """The dev rows the search learns from or predicts, in dev order: all but OUTSIDE."""
        return np.flatnonzero(self.fold_of != OUTSIDE)

    @property
    def sampled(self) -> bool:
        """Whether the search uses a sample of the dev rows (see `search_rows`)."""
        return bool((self.fold_of == OUTSIDE).any())

    def groups(self, seed: int = 0) -> np.ndarray:
        """The group of each held-out row (in `held_out` order) for comparisons that need
        several: its fold, or on the holdout one of HOLDOUT_GROUPS random groups."""
        groups = self.fold_of[self.held_out]
        if len(np.unique(groups)) < 2:
            groups = np.random.default_rng(seed).permutation(len(groups)) % HOLDOUT_GROUPS
        return groups

    def gate_groups(self, split: int) -> np.ndarray:
        """The group of each held-out row (in `held_out` order) in the gate's split `split`:
        its fold there; where the run has no such split (the holdout, a run stored before the
        splits) the harness fitted it on the run's own folds, grouped as `groups` does,
        seeded by the split."""
        if 0 < split <= len(self.gate_of):
            return self.gate_of[split - 1][self.held_out]
        return self.groups(seed=split)

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "seed": self.seed, "fold_of": self.fold_of.tolist(),
                "gate_of": [split.tolist() for split in self.gate_of]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Folds:
        return cls(int(data["k"]), int(data["seed"]), np.asarray(data["fold_of"], dtype=int),
                   tuple(np.asarray(split, dtype=int) for split in data.get("gate_of", ())))

    def dumps(self) -> str:
        return json.dumps(self.to_json())


def dev_frame(task: PreparedTask) -> pd.DataFrame:
    """The dev rows with their target: train, then valid."""
    valid = task.valid_X.assign(**{task.target: task.valid_y.to_numpy()})
    return pd.concat([task.train, valid], ignore_index=True)


def dev_labels(task: PreparedTask) -> pd.Series:
    return pd.concat([task.train[task.target], task.valid_y], ignore_index=True)


# The cells (rows times feature columns) a search learns from per executor-second of its
# budget, at most: more and a floor trial's fit takes too much of the budget for the search to
# run many. Measured: benchmarks/results/big-data-2026-12-06.
SEARCH_CELLS_PER_EXECUTOR_SECOND = 3_000
# Never a smaller sample than this many dev rows (the largest data that gets 5 folds).
MIN_SEARCH_ROWS = FOLD_ROWS[-1][0]


def search_rows(dev_rows: int, columns: int, budget_seconds: float, executors: int) -> int:
    """How many of `dev_rows` rows of `columns` feature columns a holdout search uses: all of
    them, or as many as SEARCH_CELLS_PER_EXECUTOR_SECOND allows for the budget's executor
    seconds (at least MIN_SEARCH_ROWS)."""
    cells = SEARCH_CELLS_PER_EXECUTOR_SECOND * budget_seconds * max(1, executors)
    return min(dev_rows, max(MIN_SEARCH_ROWS, int(cells / max(1, columns))))


def make_folds(task: PreparedTask, k: int | None = None, seed: int = 0,
               rows: int | None = None) -> Folds:
    """Folds of the dev rows: stratified by class for classification, shuffled with `seed`.
    A holdout uses `rows` dev rows at most (`search_rows`): a random sample of train to learn
    from and of valid to score on, in the task's proportion of the two."""
    n_train, n_dev = len(task.train), len(task.train) + len(task.valid_X)
    k = fold_count(n_dev, k)
    if k == HOLDOUT:
        fold_of = np.full(n_dev, -1)
        fold_of[n_train:] = 0
        if rows is not None and rows < n_dev:
            rng = np.random.default_rng(seed)
            learn = round(rows * n_train / n_dev)
            fold_of[:n_train][rng.permutation(n_train)[learn:]] = OUTSIDE
            fold_of[n_train:][rng.permutation(n_dev - n_train)[rows - learn:]] = OUTSIDE
        return Folds(HOLDOUT, seed, fold_of)
    labels = dev_labels(task).astype(str).to_numpy()
    splits = max(split for split, _ in GATE_PAIRS)
    return Folds(k, seed, _fold_of(task.task_type, k, seed, labels),
                 tuple(_fold_of(task.task_type, k, seed + GATE_SPLIT_SEED * r, labels)
                       for r in range(1, splits + 1)))


# The gate's split r shuffles with the run's seed plus r times this (any seed but the run's).
GATE_SPLIT_SEED = 7919


def _fold_of(task_type: str, k: int, seed: int, labels: np.ndarray) -> np.ndarray:
    """Each row's fold of `k`, shuffled with `seed` (stratified by `labels` for classes)."""
    fold_of = np.empty(len(labels), dtype=int)
    with warnings.catch_warnings():  # a class rarer than k rows: still split, less stratified
        warnings.simplefilter("ignore", UserWarning)
        for fold, (_, rows) in enumerate(fold_splitter(task_type, k, seed).split(
                np.zeros(len(labels)), labels)):
            fold_of[rows] = fold
    return fold_of


def fold_splitter(task_type: str, k: int, seed: int) -> KFold | StratifiedKFold:
    """`k` folds shuffled with `seed`: stratified by class unless the task is a regression
    (its `split` then needs the labels as `y`)."""
    if task_type == "regression":
        return KFold(k, shuffle=True, random_state=seed)
    return StratifiedKFold(k, shuffle=True, random_state=seed)


# The search on a sample predicts that many test rows too: at 2 GB, predicting all 2.56 M test
# rows left every floor configuration but the linear model over its share of the budget
# (benchmarks/results/big-data-2026-12-07c). The answer, refitted, predicts every test row.
TEST_SAMPLE_SEED = 104_729  # added to the folds' seed (any other than theirs)


def search_test_rows(folds: Folds, test_rows: int) -> np.ndarray:
    """The test rows (of `test_rows`) a search predicts, in test order: all of them, unless
    it searches a sample of the dev rows; then a seeded sample as large as its held-out
    rows."""
    if not folds.sampled or test_rows <= len(folds.held_out):
        return np.arange(test_rows)
    rng = np.random.default_rng(folds.seed + TEST_SAMPLE_SEED)
    return np.sort(rng.choice(test_rows, len(folds.held_out), replace=False))


def search_task(task: PreparedTask, folds: Folds | None) -> PreparedTask:
    """The task as its search sees it: `search_test_rows` of the test rows alone, as its
    input/test.csv and its test labels; `task` itself when they are every row."""
    rows = np.arange(len(task.test_X)) if folds is None else search_test_rows(
        folds, len(task.test_X))
    if len(rows) == len(task.test_X):
        return task
    test_X = task.test_X.iloc[rows].reset_index(drop=True)
    searched = replace(task, test_X=test_X, test_y=task.test_y.iloc[rows].reset_index(drop=True),
                       split_files={**task.split_files, "test.csv": csv_bytes(test_X)})
    # What it computed once of train (column facts, previews), the same for both.
    known = {f.name for f in fields(task)}
    searched.__dict__.update({k: v for k, v in vars(task).items() if k not in known})
    return searched


def fold_inputs(task: PreparedTask, folds: Folds, fold: int) -> dict[str, bytes]:
    """The input/ folder of one fold's run: learn from the rows outside the fold (with labels),
    predict the fold's rows (without) and the test rows (without)."""
    if folds.k == HOLDOUT and not folds.sampled:
        return task.inputs()  # byte for byte the task's own train/valid/test files
    dev = dev_frame(task)
    held = dev.iloc[folds.rows(fold)].drop(columns=[task.target])
    return {
        "train.csv": csv_bytes(dev.iloc[folds.learn_rows(fold)]),
        "valid.csv": csv_bytes(held),
        "test.csv": task.split_files["test.csv"],
        "description.md": task.description.encode("utf-8"),
    }


def all_folds_inputs(task: PreparedTask, folds: Folds) -> dict[str, bytes]:
    """The input/ folder of engine-written code that runs every fold in one process: every dev
    row the search uses, with its label, its fold, and its fold in each of the gate's other
    splits. Never given to LLM-written code, whose every fold is its own sandbox run that sees
    no label of the rows it predicts."""
    rows = folds.searched
    return {
        "train.csv": csv_bytes(dev_frame(task).iloc[rows]),
        FOLDS_FILE: csv_bytes(pd.DataFrame({
            "fold": folds.fold_of[rows],
            **{f"gate{r}": split[rows] for r, split in enumerate(folds.gate_of, start=1)}})),
        "test.csv": task.split_files["test.csv"],
        "description.md": task.description.encode("utf-8"),
    }
