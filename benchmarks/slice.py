"""Benchmark of the offline slice: one search run, then the numbers that judge it.

    python -m benchmarks.slice [--budget 10m] [--llm llama] [--data ... --target ...]

Runs `engine.run` (embedded model by default) on concrete-strength, then reads the run's
Parquet and prints: ok nodes, best valid / test score, tokens/s, the share of drafts that ran
without a debug step, and LightGBM with default settings on the same split for reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.cli import add_shared_flags
from common.errors import UserError
from engine.records.runs import open_run
from engine.run import main as run_main

DEMO = Path(__file__).parent / "data" / "concrete-strength" / "concrete.csv"


def saved_results(path: Path, budget: str) -> list[dict[str, Any]]:
    """The results a benchmark wrote to `path` before, to resume from (none yet: empty).
    UserError when they come from runs with another budget: mixed budgets compare nothing."""
    results: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
    other = sorted({str(r.get("budget", "unknown")) for r in results} - {budget})
    if other:
        raise UserError(f"{path} holds runs with budget {', '.join(other)}, not {budget}: pass "
                        "that --budget to resume them, or another --out")
    return results


def lightgbm_default(run_dir: Path) -> float:
    """LightGBM with default settings on the run's own splits, scored by the engine's scorer."""
    import lightgbm as lgb

    from benchmarks.baselines import submission_csv
    from engine.evaluation.scoring import score

    task = open_run(run_dir).task()
    X = pd.get_dummies(task.train.drop(columns=[task.target]))
    y = task.train[task.target]
    model = lgb.LGBMRegressor(verbose=-1) if task.task_type == "regression" else \
        lgb.LGBMClassifier(verbose=-1)
    model.fit(X, y)
    test = pd.get_dummies(task.test_X).reindex(columns=X.columns, fill_value=0)
    return score(task, submission_csv(task, model, test), "test")


def run_engine(argv: list[str], out: Path) -> tuple[int, Path | None]:
    """`engine.run` with `--out out --quiet` added: its exit code and the run directory it
    created (None when it failed)."""
    before = set(out.iterdir()) if out.exists() else set()
    code = run_main([*argv, "--out", str(out), "--quiet"])
    if code != 0:
        return code, None
    (run_dir,) = [p for p in set(out.iterdir()) - before if not p.name.startswith(".")]
    return 0, run_dir


def report(run_dir: Path) -> dict[str, float | int | None]:
    run = open_run(run_dir)
    rows = pd.DataFrame(run.rows)
    ok = rows[rows.status == "ok"]
    manifest = run.manifest
    spent = manifest.get("spent", {})
    drafts = rows[(rows.operator == "draft") & (rows.code != "")]
    best = manifest.get("result", {})
    llm_seconds = float(rows.llm_seconds.sum()) or 1.0
    return {
        "nodes": len(rows),
        "ok_nodes": len(ok),
        "best_valid": best.get("best_valid"),
        "best_test": best.get("best_test"),
        "best_operator": best.get("best_operator"),
        "drafts": len(drafts),
        "drafts_ok_without_debug": int((drafts.status == "ok").sum()),
        "completion_tokens_per_llm_second": float(rows.completion_tokens.sum()) / llm_seconds,
        "prompt_tokens": int(spent.get("prompt_tokens", 0)),
        "completion_tokens": int(spent.get("completion_tokens", 0)),
        "seconds": float(spent.get("seconds", 0.0)),
        "lightgbm_default_test": lightgbm_default(run_dir),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEMO))
    parser.add_argument("--target", default="strength")
    add_shared_flags(parser, budget="10m", llm="llama", out="runs/bench-slice",
                     out_help="where the run goes")
    args, extra = parser.parse_known_args(argv)
    out = args.out
    code, run_dir = run_engine(["--data", args.data, "--target", args.target, "--budget",
                                args.budget, "--llm", args.llm, *extra], out)
    if run_dir is None:
        return code
    print(f"\nrun: {run_dir}")
    for key, value in report(run_dir).items():
        shown = f"{value:.4g}" if isinstance(value, float) else value
        print(f"{key:>34}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
