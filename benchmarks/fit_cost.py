"""What one floor node costs as the rows grow: every portfolio configuration and the baseline,
run as the engine runs them (its harness, in the sandbox, on one core), on the generated table
of `benchmarks.big_data`:

    python -m benchmarks.fit_cost [--rows 5000,20000,80000] [--test-rows 20000]
        [--families lgbm,catboost,...] [--limit 600] [--out FILE.json]

For each learning size n: train.csv holds n rows, valid.csv n/3 (the holdout's proportion),
test.csv `--test-rows`. Prints and writes each configuration's seconds (the sandbox run: start,
reading, fitting, predicting, writing), the numbers the family records' cost estimates
(`search.families.Family.seconds`) are fitted to.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.big_data import TARGET, generate
from engine.task.prepare import csv_bytes
from operators.context import TaskContext
from operators.harness import assemble, baseline_code
from operators.models import model_code
from sandbox import Limits, run_script
from search.families import FAMILIES, PORTFOLIO


def inputs(rows: int, test_rows: int) -> dict[str, bytes]:
    frame = generate(rows + rows // 3 + test_rows, seed=1)
    train, valid = frame.iloc[:rows], frame.iloc[rows:rows + rows // 3]
    test = frame.iloc[rows + rows // 3:]
    return {"train.csv": csv_bytes(train),
            "valid.csv": csv_bytes(valid.drop(columns=[TARGET])),
            "test.csv": csv_bytes(test.drop(columns=[TARGET])), "description.md": b""}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="5000,20000,80000")
    parser.add_argument("--test-rows", type=int, default=20_000)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--limit", type=float, default=600.0, help="seconds a run may take")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    ctx = TaskContext(preview="", target=TARGET, task_type="binary", metric="roc_auc",
                      maximize=True, labels=("0", "1"), needs_proba=True)
    families = set(args.families.split(","))
    entries: list[tuple[str, str, dict[str, Any] | None]] = [("baseline", "lgbm", None)]
    entries += [(name, family, params) for name, family, params in PORTFOLIO
                if family in families]
    records = []
    for rows in (int(r) for r in args.rows.split(",")):
        files = inputs(rows, args.test_rows)
        for name, family, params in entries:
            code = baseline_code(ctx) if params is None else model_code(ctx, family, params)
            result = run_script(assemble(ctx, code), files, Limits(wall_seconds=args.limit))
            record = {"name": name, "family": family, "params": params, "rows": rows,
                      "test_rows": args.test_rows, "columns": 18, "status": result.status,
                      "seconds": round(result.seconds, 2)}
            records.append(record)
            print(json.dumps(record), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
