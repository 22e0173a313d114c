"""Command line: `python -m engine.predict runs/<id> new_rows.csv -o predictions.csv [--refit]`.

Predicts new rows with the run's answer as it was made. A run saves its answer's fitted models
in `best/model/` (engine/deploy/saved_model.py): then nothing trains, the answer's code runs in one
sandbox run with every fit restored, once per saved model (a k-fold run's fold models, their
predictions combined as the run combined its test predictions; a holdout run's model refitted
on train + valid), so the new rows get what `best/submission/test.csv` got for the test rows.
Without a saved model (a run stored before they were, `--no-save-model`, an answer whose fits
could not be saved) the answer is trained again, the same way. `--refit` trains once on every
row of train+valid instead. The solution sees the harness layout it was searched in, with the
new rows, features only, as both `input/valid.csv` and `input/test.csv`; its
`submission/valid.csv` is read.

Bad input (not a run directory, an unreadable CSV, columns that differ from the training
features, text in a numeric column) ends with one line and exit code 2, and nothing is
written; a run without a best solution or a solution that fails on the new rows ends with one
line and exit code 1.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

from common.errors import EngineError, UserError, error_exit
from engine.deploy.saved_model import (
    replay_inputs,
    saved_rows,
    saved_states,
    training_inputs,
)
from engine.evaluation.folds import Folds, dev_frame
from engine.evaluation.scoring import (
    SubmissionError,
    combine_predictions,
    frame_csv,
    read_stacked,
    read_submission,
)
from engine.records.runs import open_run
from engine.task.prepare import PreparedTask, csv_bytes
from fileio import write_atomic
from operators.fitted import SERVE, fitted_objects, fitted_wrapper
from sandbox import ExecResult, Limits, SandboxError, Session, run_script, start_session

DEFAULT_TIMEOUT = 600.0
# A served answer's one-row p50 (`served_one_row_ms`): calls, and the sleep before each, so
# each call finds the session idle as an interactive caller would (benchmarks/results/
# latency-arrays-2026-12-07: 10 ms gaps).
SERVED_CALLS, SERVED_GAP = 20, 0.01
T = TypeVar("T")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine.predict",
        description="Predict new rows with a run's answer, in the sandbox: with its saved "
                    "model, or trained again when it has none (or with --refit).",
    )
    parser.add_argument("run", type=Path, help="the run directory, runs/<run_id>")
    parser.add_argument("rows", type=Path, help="CSV of new rows with the training features")
    parser.add_argument("-o", "--output", type=Path, default=Path("predictions.csv"),
                        help="where the predictions go (default: predictions.csv)")
    parser.add_argument("--refit", action="store_true",
                        help="train the answer again, once, on every train + valid row, "
                             "instead of using its saved model")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds the solution may run (default: the run's --exec-timeout "
                             f"doubled, at least {DEFAULT_TIMEOUT:.0f})")
    return parser


def read_rows(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise UserError(f"new rows {path} is not a file; pass a CSV with the training features")
    try:
        frame = pd.read_csv(path, low_memory=False, encoding="utf-8-sig")
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot read new rows {path} as a CSV: {first}") from exc
    if frame.empty:
        raise UserError(f"new rows {path} has no rows; pass at least one row to predict")
    return frame


def feature_rows(task: PreparedTask, frame: pd.DataFrame, path: object) -> pd.DataFrame:
    """The new rows with exactly the training features, in training order; the target column,
    if present, is dropped. Missing or extra columns are a UserError naming them all."""
    features = [str(c) for c in task.train.columns if c != task.target]
    given = [str(c) for c in frame.columns if c != task.target]
    missing = [c for c in features if c not in given]
    extra = [c for c in given if c not in features]
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing columns " + ", ".join(map(repr, missing)))
        if extra:
            parts.append("extra columns " + ", ".join(map(repr, extra)))
        raise UserError(f"new rows {path} do not match the training features: "
                        + "; ".join(parts) + f" (expected: {', '.join(features)})")
    frame.columns = [str(c) for c in frame.columns]
    frame = frame[features]
    trained, given_types = task.train.dtypes, frame.dtypes
    # Numbers given as text (a JSON string, a CSV quoted): read as numbers, or refused.
    as_text = [c for c in features if pd.api.types.is_numeric_dtype(trained[c])
               and not pd.api.types.is_numeric_dtype(given_types[c])]
    text = [c for c in as_text
            if pd.to_numeric(frame[c], errors="coerce").isna().gt(frame[c].isna()).any()]
    if text:
        raise UserError(f"new rows {path}: column{'s' * (len(text) > 1)} "
                        + ", ".join(map(repr, text)) + " held numbers in training but hold "
                        "text here; give numbers (empty for missing)")
    return frame.assign(**{c: pd.to_numeric(frame[c]) for c in as_text}) if as_text else frame


def training_sets(task: PreparedTask, folds: Folds | None, refit: bool,
                  rows: int | None = None) -> list[bytes]:
    """The input/train.csv of each model to fit: every row of train + valid (--refit), else
    the answer's own (the learn rows of each fold; a holdout run's answer is refitted on
    every train + valid row, or on the `rows` its saved model learned from)."""
    if refit:
        return [csv_bytes(dev_frame(task))]
    return [inputs["train.csv"] for inputs in training_inputs(task, folds, rows)]


class Answer:
    """A run's answer, ready to predict new rows. With a saved model (and no `refit`) the
    model is served by a sandbox session, started on the first call and kept until `close()`:
    later calls pay only the solution's own steps, not an interpreter, imports and unpickling.
    Without one, every call trains the answer again."""

    def __init__(self, run: Path, *, refit: bool = False, timeout: float | None = None) -> None:
        opened = open_run(run)
        self.run, self.task = run, opened.task()
        solution = run / "best" / "solution.py"
        if not solution.is_file():
            raise EngineError(f"{run} has no best solution (no node scored ok yet, or every "
                              "ok node breaks a constraint: see summary.md); resume the run "
                              "to find one")
        if timeout is None:
            configured = float(opened.config.get("exec_timeout") or 0.0)
            timeout = max(DEFAULT_TIMEOUT, 2 * configured)
        self.timeout, self.refit = timeout, refit
        self.code, self.folds = solution.read_text(), opened.store.load_folds()
        self.states = None if refit else saved_states(run / "best")
        self.rows = None if self.states is None else saved_rows(run / "best")
        self._session: Session | None = None

    def predict(self, rows: pd.DataFrame, source: object) -> tuple[bytes, int, str]:
        """The predictions CSV of `rows` (`source` names them in errors), how many, and how
        they were made."""
        frame = feature_rows(self.task, rows, source)
        new = csv_bytes(frame)
        if self.states is not None:
            parts = self._served(new, len(frame))
            how = f"its saved model ({len(self.states)} fitted, nothing trained)"
        else:
            parts = []
            trains = training_sets(self.task, self.folds, self.refit, self.rows)
            for train in trains:
                result = _run(self.code, {"train.csv": train, "valid.csv": new, "test.csv": new,
                                          "description.md": self.task.description.encode()},
                              self.timeout)
                parts.append(_read(partial(read_submission, self.task, result.valid_csv,
                                           "valid", len(frame))))
            how = ("trained again on train + valid" if self.refit else
                   f"trained again ({len(trains)} fit{'s' * (len(trains) > 1)}: no saved "
                   "model)")
        return frame_csv(self.task, combine_predictions(self.task, parts)), len(frame), how

    def predict_frame(self, rows: pd.DataFrame, source: object) -> pd.DataFrame:
        """`predict`'s predictions as a frame (what the Python API hands back)."""
        predictions, _, _ = self.predict(rows, source)
        return pd.read_csv(io.BytesIO(predictions))

    def _served(self, new: bytes, count: int) -> list[pd.DataFrame]:
        assert self.states is not None
        if self._session is None or not self._session.alive:
            # A fitted make_model() reads no training rows: none are copied in.
            trains = ([b""] * len(self.states) if fitted_objects(self.states) else
                      [inputs["train.csv"]
                       for inputs in training_inputs(self.task, self.folds, self.rows)])
            try:
                self._session = start_session(fitted_wrapper(SERVE), replay_inputs(
                    trains, self.code, self.states), Limits(wall_seconds=self.timeout))
            except SandboxError as exc:
                raise EngineError(f"the sandbox could not run the solution: {exc}") from exc
        reply = self._session.request(new)
        if reply.csv is None:
            raise EngineError(f"the best solution failed on the new rows: {reply.error}")
        return _read(partial(read_stacked, self.task, reply.csv, "valid", count,
                             len(self.states)))

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def predict(run: Path, rows: Path, output: Path, *, refit: bool = False,
            timeout: float | None = None) -> tuple[int, str]:
    """Write predictions for `rows` to `output`; returns how many, and how they were made."""
    with Answer(run, refit=refit, timeout=timeout) as answer:
        predictions, count, how = answer.predict(read_rows(rows), rows)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(output, predictions)
    return count, how


def served_one_row_ms(run: Path, row: pd.DataFrame, calls: int = SERVED_CALLS,
                      gap: float = SERVED_GAP) -> float | None:
    """The p50 ms of `calls` warm one-row predictions of the run's saved answer as the API
    serves them (its sandbox session, `predict_frame`), after a warm-up of 3, each after
    `gap` seconds of sleep; None when it has no saved model or cannot serve one."""
    try:
        with Answer(run) as answer:
            if answer.states is None:
                return None
            for _ in range(3):
                answer.predict_frame(row.copy(), "a test row")
            seconds = []
            for _ in range(calls):
                time.sleep(gap)
                start = time.perf_counter()
                answer.predict_frame(row.copy(), "a test row")
                seconds.append(time.perf_counter() - start)
    except (EngineError, UserError):
        return None
    return 1000.0 * float(np.median(seconds))


def _read(parse: Callable[[], T]) -> T:
    try:
        return parse()
    except SubmissionError as exc:
        raise EngineError(f"the best solution wrote unusable predictions: {exc}") from exc


def _run(script: str, inputs: dict[str, bytes], timeout: float) -> ExecResult:
    """One sandbox run that must end ok with predictions, else an EngineError saying why."""
    try:
        result = run_script(script, inputs, Limits(wall_seconds=timeout))
    except SandboxError as exc:
        raise EngineError(f"the sandbox could not run the solution: {exc}") from exc
    if result.status != "ok" or result.valid_csv is None:
        reason = result.error or f"it ended with status {result.status} and wrote no predictions"
        raise EngineError(f"the best solution failed on the new rows ({result.status}): "
                          f"{reason}")
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout is not None and args.timeout <= 0:
        print(f"error: --timeout must be positive, got {args.timeout}", file=sys.stderr)
        return 2
    try:
        count, how = predict(args.run, args.rows, args.output, refit=args.refit,
                             timeout=args.timeout)
    except EngineError as exc:
        return error_exit(exc)
    print(f"wrote {count} predictions to {args.output} (the answer of {args.run.name}, "
          f"{how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
