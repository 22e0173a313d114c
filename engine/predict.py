"""Command line: `python -m engine.predict runs/<id> new_rows.csv -o predictions.csv [--refit]`.

Trains the run's best solution inside the sandbox and predicts the new rows: the solution sees
the harness layout it was searched in, with `input/train.csv` the run's train split (or, with
`--refit`, train plus valid with the valid labels joined back) and the new rows, features only,
as both `input/valid.csv` and `input/test.csv`. Its `submission/valid.csv` becomes the output.

Bad input (not a run directory, an unreadable CSV, columns that differ from the training
features) ends with one line and exit code 2, and nothing is written; a run without a best
solution or a solution that fails on the new rows ends with one line and exit code 1.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

import pandas as pd

from engine.runs import open_run
from engine.task import PreparedTask
from sandbox import Limits, SandboxError, run_script
from search.errors import EngineError, UserError, exit_code

DEFAULT_TIMEOUT = 600.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine.predict",
        description="Train a run's best solution in the sandbox and predict new rows.",
    )
    parser.add_argument("run", type=Path, help="the run directory, runs/<run_id>")
    parser.add_argument("rows", type=Path, help="CSV of new rows with the training features")
    parser.add_argument("-o", "--output", type=Path, default=Path("predictions.csv"),
                        help="where the predictions go (default: predictions.csv)")
    parser.add_argument("--refit", action="store_true",
                        help="train on train + valid (with its labels) instead of train only")
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


def feature_rows(task: PreparedTask, frame: pd.DataFrame, path: Path) -> pd.DataFrame:
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
    return frame[features]


def training_csv(task: PreparedTask, refit: bool) -> bytes:
    """input/train.csv: the run's train split as shown during the search, or train + valid."""
    if not refit:
        return task.split_files["train.csv"]
    valid = task.valid_X.copy()
    valid[task.target] = task.valid_y.to_numpy()
    both = pd.concat([task.train, valid[list(task.train.columns)]], ignore_index=True)
    return _csv(both)


def _csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False, lineterminator="\n").encode("utf-8")


def predict(run: Path, rows: Path, output: Path, *, refit: bool = False,
            timeout: float | None = None) -> int:
    """Write predictions for `rows` to `output`; returns how many rows were predicted."""
    opened = open_run(run)
    task = opened.task()
    frame = feature_rows(task, read_rows(rows), rows)
    solution = run / "best" / "solution.py"
    if not solution.is_file():
        raise EngineError(f"{run} has no best solution (no node scored ok yet, or every ok "
                          "node breaks a constraint: see summary.md); resume the run to find one")
    new = _csv(frame)
    inputs = {"train.csv": training_csv(task, refit), "valid.csv": new, "test.csv": new,
              "description.md": task.description.encode("utf-8")}
    if timeout is None:
        configured = float(opened.config.get("exec_timeout") or 0.0)
        timeout = max(DEFAULT_TIMEOUT, 2 * configured)
    try:
        result = run_script(solution.read_text(), inputs, Limits(wall_seconds=timeout))
    except SandboxError as exc:
        raise EngineError(f"the sandbox could not run the solution: {exc}") from exc
    if result.status != "ok" or result.valid_csv is None:
        reason = result.error or f"it ended with status {result.status} and wrote no predictions"
        raise EngineError(f"the best solution failed on the new rows ({result.status}): {reason}")
    predictions = pd.read_csv(io.BytesIO(result.valid_csv))
    if len(predictions) != len(frame) or "prediction" not in predictions.columns:
        raise EngineError(f"the best solution wrote {len(predictions)} predictions with columns "
                          f"{list(predictions.columns)}; expected {len(frame)} rows with a "
                          "`prediction` column")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_bytes(result.valid_csv)
    os.replace(tmp, output)
    return len(predictions)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout is not None and args.timeout <= 0:
        print(f"error: --timeout must be positive, got {args.timeout}", file=sys.stderr)
        return 2
    try:
        count = predict(args.run, args.rows, args.output, refit=args.refit,
                        timeout=args.timeout)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc)
    trained = "train + valid" if args.refit else "train"
    print(f"wrote {count} predictions to {args.output} (best solution of {args.run.name}, "
          f"trained on {trained})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
