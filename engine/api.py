"""The Python API: what a notebook user calls instead of the command line.

    from engine.api import fit, load

    predictor = fit("train.csv", "price", budget="10m")   # a path or a DataFrame
    predictor.leaderboard()                               # one row per node, best first
    predictor.predict(new_rows)                           # a DataFrame of the features
    predictor = load("runs/<run_id>")                     # a finished run, later

`fit` takes the command line's options as keywords (`llm="vllm:..."`, `executors=4`,
`metric="roc_auc"`, ...; the names of `engine.config.RunConfig`) and drives the same run
object as `python -m engine.run` (engine/search_run.py): the same checks, the same run
directory. Predictions go through `engine.predict`: the answer's code, in the sandbox, with
the fitted models the run saved in best/model/ (nothing trains; a sandboxed process loads them
once and serves every later call), or trained again when it has none. Loading a model that a
search's code wrote is running code, so it never happens in this process.
"""

from __future__ import annotations

import tempfile
import weakref
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from common.errors import UserError
from engine.config import RunConfig, merge, parse_budget
from engine.evaluation.scoring import class_probabilities
from engine.predict import Answer
from engine.records.runs import StoredRun, open_run

_OPTIONS = {f.name for f in fields(RunConfig)} - {"data", "target", "budget"}


def fit(data: str | Path | pd.DataFrame, target: str, budget: str | float = "10m",
        **options: Any) -> Predictor:
    """Search for a model of `target` in `data` for `budget` (90s, 10m, 2h or seconds); the
    options are the command line's, by their RunConfig names. A DataFrame is written, as a
    CSV, into the output folder (`out`, default runs/), where the run can read it again."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise UserError(f"unknown option(s) {', '.join(unknown)}; the options are "
                        f"{', '.join(sorted(_OPTIONS))}")
    options.setdefault("quiet", True)  # log lines: a live display does not belong in a notebook
    out = Path(options.get("out", RunConfig().out))
    if isinstance(data, pd.DataFrame):
        out.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkstemp(prefix="data-", suffix=".csv", dir=out)[1])
        data.to_csv(path, index=False)
        data = path
    config = merge(RunConfig(), {"data": Path(data), "target": target,
                                 "budget": parse_budget(budget), **options}).validate()
    # Here, not at the top: the run object brings Ray, which load() and predict() never need.
    from engine.search_run import SearchRun

    return Predictor(SearchRun.new(config, Console(soft_wrap=True)).start())


def load(run_dir: str | Path) -> Predictor:
    """The predictor of a run directory (runs/<run_id>)."""
    open_run(Path(run_dir))  # a folder that is not a run is a UserError now, not later
    return Predictor(Path(run_dir))


class Predictor:
    """A finished run: its answer, its nodes, its summary.

    The first `predict` starts a sandboxed process that loads the saved model (best/model/)
    once and serves every later call, so only the first call pays an interpreter, the
    imports and the unpickling. It serves the answer as it was at that first call: `load` the
    run again to serve a resumed run's new answer. `close()` (or `with`) ends it."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._answer: Answer | None = None
        self._finalizer: weakref.finalize | None = None

    def _run(self) -> StoredRun:
        return open_run(self.run_dir)

    def leaderboard(self) -> pd.DataFrame:
        """One row per scored node, best valid score first: its operator, valid (out-of-fold)
        and test scores, what it costs, and whether it is the run's answer."""
        run = self._run()
        answer = run.journal.final()
        rows = [{
            "node_id": n.node_id, "operator": n.operator.value, "status": n.status.value,
            "valid": n.metric_raw, "test": run.tests.get(n.node_id),
            "train_seconds": n.train_seconds, "predict_ms_per_row": n.predict_ms_per_row,
            "model_mb": n.model_mb, "exec_seconds": n.exec_seconds,
            "llm_seconds": n.llm_seconds, "answer": answer is not None and n is answer,
            "plan": n.plan,
        } for n in sorted(run.journal, key=lambda n: (n.metric is None, -(n.metric or 0.0)))]
        return pd.DataFrame(rows)

    def summary(self) -> str:
        return (self.run_dir / "summary.md").read_text(encoding="utf-8")

    def solution_code(self) -> str:
        """The answer as a standalone script (best/solution.py)."""
        path = self.run_dir / "best" / "solution.py"
        if not path.is_file():
            raise UserError(f"{self.run_dir} has no answer yet (no node scored ok)")
        return path.read_text(encoding="utf-8")

    def _predictions(self, rows: pd.DataFrame) -> pd.DataFrame:
        if self._answer is None:
            self._answer = Answer(self.run_dir)
            # The session is a sandboxed process: it ends with this predictor, or at exit.
            self._finalizer = weakref.finalize(self, self._answer.close)
        return self._answer.predict_frame(rows.copy(), "the rows given")

    def close(self) -> None:
        """End the sandboxed process that serves the saved model (a later predict starts
        another). Also done when the predictor is garbage-collected, or at exit."""
        if self._finalizer is not None:
            self._finalizer()
        self._answer, self._finalizer = None, None

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def predict(self, rows: pd.DataFrame) -> pd.Series:
        """One prediction per row of `rows` (the training features; a target column is
        ignored), made as the answer's test predictions were."""
        return self._predictions(rows)["prediction"]

    def predict_proba(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Class probabilities, one column per class (classification under a metric that
        scores probabilities: roc_auc, log_loss)."""
        proba = class_probabilities(self._predictions(rows))
        if proba.columns.empty:
            raise UserError("this run's answer predicts labels, not probabilities: search "
                            "with metric='roc_auc' or 'log_loss' to get them")
        return proba
