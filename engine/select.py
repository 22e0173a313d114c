"""`--select cv`: choose the final winner by k-fold cross-validation, not by one valid split.

With many nodes, the best valid score is optimistic (the search selected on it). At the end of a
run the top candidates are re-run in the sandbox on k folds of train+valid and scored in the
driver; the one with the best mean fold score becomes `best/`. Test labels stay untouched.
"""

from __future__ import annotations

import io
import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any

import pandas as pd
from sklearn.model_selection import KFold, StratifiedKFold

from engine.scoring import SubmissionError, score
from engine.task import PreparedTask
from sandbox import Limits, run_script
from search.journal import Journal
from search.node import Node


@dataclass(frozen=True, slots=True)
class CvScore:
    node_id: str
    valid_raw: float | None
    fold_scores: tuple[float, ...]
    error: str  # why a fold failed; empty when all ran

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.fold_scores) if self.fold_scores and not self.error else None

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.fold_scores) if len(self.fold_scores) > 1 else None


def _csv(frame: pd.DataFrame) -> bytes:
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


def cross_validate(task: PreparedTask, node: Node, folds: int, seed: int,
                   limits: Limits) -> CvScore:
    """Run the node's script on each fold of train+valid; stop at the first failing fold."""
    full = pd.concat(
        [task.train, task.valid_X.assign(**{task.target: task.valid_y.to_numpy()})],
        ignore_index=True,
    )
    y = full[task.target]
    splitter: KFold | StratifiedKFold
    if task.task_type == "regression":
        splitter = KFold(folds, shuffle=True, random_state=seed)
    else:
        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    scores: list[float] = []
    for train_rows, fold_rows in splitter.split(full, y.astype(str)):
        fold = full.iloc[fold_rows]
        fold_X = fold.drop(columns=[task.target]).reset_index(drop=True)
        inputs = {
            "train.csv": _csv(full.iloc[train_rows]),
            "valid.csv": _csv(fold_X),
            "test.csv": _csv(fold_X),  # the harness needs one; only valid is scored
            "description.md": task.description.encode(),
        }
        result = run_script(node.code, inputs, limits)
        if result.status != "ok":
            return CvScore(node.node_id, node.metric_raw, tuple(scores),
                           f"fold {len(scores) + 1}: {result.status} {result.error}".strip())
        fold_task = replace(task, valid_X=fold_X,
                            valid_y=fold[task.target].reset_index(drop=True))
        try:
            scores.append(score(fold_task, result.valid_csv, "valid"))
        except SubmissionError as exc:
            return CvScore(node.node_id, node.metric_raw, tuple(scores),
                           f"fold {len(scores) + 1}: {exc}")
    return CvScore(node.node_id, node.metric_raw, tuple(scores), "")


def select_by_cv(task: PreparedTask, journal: Journal, *, top_k: int = 3, folds: int = 5,
                 seed: int = 0, limits: Limits | None = None) -> tuple[str | None, list[CvScore]]:
    """Cross-validate the top-k distinct ok nodes by valid score; return the winner's id."""
    seen: set[str] = set()
    candidates: list[Node] = []
    for node in sorted(journal.eligible_nodes, key=lambda n: (-(n.metric or 0.0), n.step)):
        if node.code_hash not in seen:
            seen.add(node.code_hash)
            candidates.append(node)
        if len(candidates) == top_k:
            break
    scores = [cross_validate(task, n, folds, seed, limits or Limits()) for n in candidates]
    ranked = [s for s in scores if s.mean is not None]
    if not ranked:
        return None, scores
    winner = max(ranked, key=lambda s: task.metric.normalise(s.mean or 0.0))
    return winner.node_id, scores


def selection_record(winner: str | None, scores: list[CvScore],
                     tests: dict[str, float | None], folds: int) -> dict[str, Any]:
    return {
        "method": f"{folds}-fold cv on train+valid",
        "winner": winner,
        "candidates": [
            {**asdict(s), "cv_mean": s.mean, "cv_sd": s.sd, "test_raw": tests.get(s.node_id)}
            for s in scores
        ],
    }
