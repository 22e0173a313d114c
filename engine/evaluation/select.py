"""The final selection: which node a run hands over as `best/`, decided once the search ends.

With many nodes, the best valid score is optimistic (the search selected on it), and on a few
hundred valid rows two nodes' scores differ by noise. Three methods (`--select`):

- `confirmed` (default): the engine's baseline root stays the answer unless a node beats it on
  valid in at least CONFIDENCE of paired bootstrap resamples of the valid rows. Among the nodes
  that do, the best by valid score wins, except that an engine-written ensemble the best does
  not beat with that same confidence is preferred: averaging near-equal models lowers variance,
  which a valid score cannot show. Compares the nodes' kept valid predictions; runs nothing.
- `valid`: the best valid score, as the search saw it.
- `cv`: the top candidates are re-run on the search's executors (the same sandboxes as every
  candidate) on k folds of train+valid and scored in the driver; the best mean fold score wins.

Test labels stay untouched by all three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

import numpy as np
import pandas as pd

from engine.evaluation.blend import cross_fitted
from engine.evaluation.folds import fold_splitter
from engine.evaluation.scoring import (
    SubmissionError,
    class_probabilities,
    read_submission,
    score,
    submission_metric,
)
from engine.evaluation.selection import Candidate, Comparison, EnsembleCheck
from engine.task.prepare import PreparedTask, csv_bytes
from sandbox import ExecResult, Limits
from search.journal import Journal
from search.node import Node

# Runs a script in a sandbox: the search's executors (actors.workers.Workers.run_script).
Runner = Callable[[str, dict[str, bytes], Limits], ExecResult]
# Runs scripts side by side on every executor, results in the jobs' order (run_scripts).
Job = tuple[str, dict[str, bytes], Limits]
BatchRunner = Callable[[list[Job]], list[ExecResult]]


def one_at_a_time(run: Runner) -> BatchRunner:
    """A BatchRunner that runs the jobs one after the other (one sandbox, no executors)."""
    return lambda jobs: [run(*job) for job in jobs]


CONFIDENCE = 0.9  # share of resamples in which a node must beat the one it replaces
RESAMPLES = 1000
TOP_K = 5  # distinct prediction sets above the baseline compared against it, best valid first
CV_TOP_K, CV_FOLDS = 3, 5  # --select cv: the nodes it cross-validates, and in how many folds
# Each rule in words (the summary's "method"), by its --select name.
METHODS = {
    "confirmed": f"confirmed: beats the baseline root in >= {CONFIDENCE:.0%} of {RESAMPLES} "
                 "paired bootstrap resamples of valid",
    "valid": "best valid score",
    "cv": f"{CV_FOLDS}-fold cv on train+valid",
}


def cross_validation_runs(task: PreparedTask, node: Node, folds: int, seed: int,
                          limits: Limits) -> list[tuple[Job, PreparedTask]]:
    """The node's script on each fold of train+valid: its job, and the task that scores the
    fold's predictions."""
    full = pd.concat(
        [task.train, task.valid_X.assign(**{task.target: task.valid_y.to_numpy()})],
        ignore_index=True,
    )
    y = full[task.target]
    runs = []
    for train_rows, fold_rows in fold_splitter(task.task_type, folds, seed).split(
            full, y.astype(str)):
        fold = full.iloc[fold_rows]
        fold_X = fold.drop(columns=[task.target]).reset_index(drop=True)
        inputs = {
            "train.csv": csv_bytes(full.iloc[train_rows]),
            "valid.csv": csv_bytes(fold_X),
            "test.csv": csv_bytes(fold_X),  # the harness needs one; only valid is scored
            "description.md": task.description.encode(),
        }
        fold_task = replace(task, valid_X=fold_X,
                            valid_y=fold[task.target].reset_index(drop=True))
        runs.append(((node.code, inputs, limits), fold_task))
    return runs


def cv_score(node: Node, fold_tasks: list[PreparedTask],
             results: list[ExecResult]) -> Candidate:
    """The node as a `cv` candidate: its fold scores; the first fold that failed or wrote no
    valid submission ends them, with why."""
    scores: list[float] = []
    error = ""
    for fold_task, result in zip(fold_tasks, results, strict=True):
        if result.status != "ok":
            error = f"fold {len(scores) + 1}: {result.status} {result.error}".strip()
            break
        try:
            scores.append(score(fold_task, result.valid_csv, "valid"))
        except SubmissionError as exc:
            error = f"fold {len(scores) + 1}: {exc}"
            break
    return Candidate(node.node_id, node.operator.value, node.metric_raw,
                     fold_scores=tuple(scores), error=error)


def select_by_cv(task: PreparedTask, journal: Journal, run_all: BatchRunner, *,
                 top_k: int = CV_TOP_K, folds: int = CV_FOLDS, seed: int = 0,
                 limits: Limits | None = None) -> Comparison:
    """`cv`: cross-validate the top-k distinct ok nodes by valid score, every fold of every
    node side by side (`run_all`); the best mean fold score wins."""
    best = journal.best()
    candidates = distinct_best(journal.eligible_nodes)[:top_k]
    planned = [cross_validation_runs(task, n, folds, seed, limits or Limits())
               for n in candidates]
    results = iter(run_all([job for runs in planned for job, _ in runs]))
    scores = [cv_score(node, [fold_task for _, fold_task in runs],
                       [next(results) for _ in runs])
              for node, runs in zip(candidates, planned, strict=True)]
    ranked = [s for s in scores if s.cv_mean is not None]
    winner = (max(ranked, key=lambda s: task.metric.normalise(s.cv_mean or 0.0)).node_id
              if ranked else None)
    return Comparison(winner, best.node_id if best else None, candidates=tuple(scores),
                      note="" if ranked or not scores else
                      "no cross-validated node ran every fold: the best valid score")


# --- confirmed ----------------------------------------------------------------------------------


def paired_bootstrap(task: PreparedTask, a: pd.DataFrame, b: pd.DataFrame, *,
                     resamples: int = RESAMPLES, seed: int = 0,
                     truth: pd.Series | None = None) -> float:
    """Share of resamples of the held-out rows (labels `truth`, default the valid split's) in
    which submission `a` scores better than `b` (normalised metric; a tie counts half). Both
    are scored on the same rows each time."""
    truth = task.valid_y if truth is None else truth
    counts = resample_counts(len(truth), resamples, seed)
    return share_better(task, resampled_scores(task, a, counts, truth),
                        resampled_scores(task, b, counts, truth))


def resample_counts(n: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """One bootstrap resample of n rows per matrix row: how often each row was drawn. Row i
    drawn k times weighs k, so one matrix product scores every resample."""
    rng = np.random.default_rng(seed)
    return np.stack([np.bincount(rng.integers(0, n, n), minlength=n)
                     for _ in range(resamples)]).astype(float)


def share_better(task: PreparedTask, a: np.ndarray, b: np.ndarray) -> float:
    """Share of resamples where raw scores `a` beat `b` in the metric's direction; ties half."""
    diff = (a - b) if task.metric.maximize else (b - a)
    return float(np.mean(diff > 0) + 0.5 * np.mean(diff == 0))


def resampled_scores(task: PreparedTask, submission: pd.DataFrame, counts: np.ndarray,
                     truth: pd.Series | None = None) -> np.ndarray:
    """The raw metric of a checked held-out submission (labels `truth`, default the valid
    split's) on each resample, a row of `counts` (how often each row was drawn), by the
    metric's resampled form (common.metric)."""
    proba = class_probabilities(submission) if task.metric.needs_proba else None
    truth = task.valid_y if truth is None else truth
    return task.metric.score_resamples(truth.reset_index(drop=True), submission["prediction"],
                                       proba, task.labels, counts)


def select_confirmed(task: PreparedTask, journal: Journal,
                     predictions: Callable[[str], bytes | None], *, seed: int = 0,
                     truth: pd.Series | None = None) -> Comparison:
    """`confirmed` (see the module docstring); `predictions(node_id)` gives a node's kept
    held-out predictions, whose labels are `truth` (default: the valid split's). The
    comparison's winner is None when nothing is eligible."""
    truth = task.valid_y if truth is None else truth
    best = journal.best()
    search_best = best.node_id if best else None
    baseline = journal.baseline()
    if baseline is not None and not journal.is_eligible(baseline):
        baseline = None
    if best is None or baseline is None or best is baseline:
        return Comparison(search_best, search_best, confidence=CONFIDENCE,
                          baseline=baseline.node_id if baseline else None,
                          note="the baseline root has the best valid score" if best is baseline
                          else "no eligible baseline root to confirm against: best valid score")

    def read(node: Node) -> pd.DataFrame | None:
        try:
            return read_submission(task, predictions(node.node_id), "valid", len(truth))
        except SubmissionError:
            return None

    base = read(baseline)
    if base is None:
        return Comparison(search_best, search_best, baseline.node_id, CONFIDENCE,
                          note="no kept predictions for the baseline root: best valid score")
    # The same resamples for every comparison; each node is scored on them once.
    counts = resample_counts(len(truth), seed=seed)
    base_scores = resampled_scores(task, base, counts, truth)
    above = distinct_best(n for n in journal.eligible_nodes
                      if (n.metric or 0.0) > (baseline.metric or 0.0))
    confirmed: list[tuple[Node, np.ndarray]] = []
    candidates: list[Candidate] = []
    # Different code often makes the same predictions (a draft re-written, an improve that
    # changed nothing that matters): one check per prediction set keeps the 5 slots for
    # candidates that can differ.
    seen: dict[bytes, str] = {}
    copies: list[tuple[str, str]] = []
    for node in above:
        if len(candidates) == TOP_K:
            break
        frame = read(node)
        if frame is not None:
            key = frame.to_csv(index=False).encode()
            if key in seen:
                copies.append((node.node_id, seen[key]))
                continue
            seen[key] = node.node_id
        scores = None if frame is None else resampled_scores(task, frame, counts, truth)
        p = None if scores is None else share_better(task, scores, base_scores)
        candidates.append(Candidate(node.node_id, node.operator.value, node.metric_raw,
                                    p_beats_baseline=p))
        if scores is not None and p is not None and p >= CONFIDENCE:
            confirmed.append((node, scores))
    winner = confirmed[0][0] if confirmed else baseline
    check = None
    if confirmed and not winner.operator.traits.combines:
        top = confirmed[0][1]
        for node, scores in confirmed[1:]:
            if node.operator.traits.combines:
                p = share_better(task, top, scores)
                check = EnsembleCheck(node.node_id, winner.node_id, p, p < CONFIDENCE)
                if check.preferred:
                    winner = node
                break
    return Comparison(winner.node_id, search_best, baseline.node_id, CONFIDENCE,
                      tuple(candidates), tuple(copies), check)


def cross_fitted_score(task: PreparedTask, node: Node,
                       predictions: Callable[[str], bytes | None], truth: pd.Series,
                       groups: np.ndarray) -> float | None:
    """The raw score of ensemble `node` cross-fitted (engine/evaluation/blend.py) over the
    candidates it selected among (its hint): rows in `groups` (`Folds.groups`). None when a
    candidate's kept predictions are missing, or for a node that is not an ensemble."""
    if not node.operator.traits.combines or not node.hint:
        return None
    try:
        candidates = {i: read_submission(task, predictions(i), "valid", len(truth))
                      for i in node.hint.split(",")}
    except SubmissionError:
        return None
    return submission_metric(task, cross_fitted(task, candidates, truth, groups),
                             truth.reset_index(drop=True))


def distinct_best(nodes: Iterable[Node]) -> list[Node]:
    """Best valid first, one node per code hash (the earliest)."""
    seen: set[str] = set()
    out: list[Node] = []
    for node in sorted(nodes, key=lambda n: (-(n.metric or 0.0), n.step)):
        if node.code_hash not in seen:
            seen.add(node.code_hash)
            out.append(node)
    return out
