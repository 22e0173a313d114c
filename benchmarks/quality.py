"""Does the search beat its own baseline root? One run per task, then the numbers that judge it.

    python -m benchmarks.quality [--suite lite] [--budget 15m] [--llm llama] [--out runs/quality]

For each task of the suite: one `engine.run` (final selection `confirmed` unless `--select` is
passed through), then from its Parquet rows the test score of the baseline root, of the node
the run handed over in best/ and of the best node by valid score, LightGBM with default settings
on the same split, the operator of the handed-over node, and the debug success rate. Test scores
are read after the run; nothing in the search saw them. Prints a markdown table and writes it,
with the raw numbers as JSON, under --out, after every task: run again with the same --out and
it resumes, skipping the tasks already there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.cli import add_shared_flags
from benchmarks.datasets import Dataset, suite
from benchmarks.slice import lightgbm_default, run_engine, saved_results
from common.errors import UserError, error_exit
from common.metric import METRICS
from engine.records.runs import open_run


def _debug_success(rows: pd.DataFrame) -> tuple[int, int]:
    """(debug nodes that ran ok, debug nodes) — a debug step 'succeeds' when its code runs."""
    debugs = rows[rows.operator == "debug"]
    return int((debugs.status == "ok").sum()), len(debugs)


def measure(dataset: Dataset, run_dir: Path) -> dict[str, Any]:
    run = open_run(run_dir)
    rows = pd.DataFrame(run.rows)
    manifest = run.manifest
    result = manifest.get("result", {})
    selection = manifest.get("selection", {})
    baseline = rows[rows.operator == "baseline"]
    ok_llm = rows[(rows.status == "ok") & (rows.operator != "baseline")]
    fixed, debugs = _debug_success(rows)
    search_best = selection.get("search_best") or result.get("best_node")
    search_best_test = rows.loc[rows.node_id == search_best, "test_metric_raw"]
    return {
        "task": dataset.name,
        "metric": run.task().metric.name,
        "nodes": len(rows),
        "ok_llm_nodes": len(ok_llm),
        "baseline_valid": float(baseline.metric_raw.iloc[0]) if len(baseline) else None,
        "baseline_test": float(baseline.test_metric_raw.iloc[0]) if len(baseline) else None,
        "best_valid": result.get("best_valid"),
        "best_test": result.get("best_test"),
        "best_operator": result.get("best_operator"),
        "selection": selection.get("method"),
        "best_valid_node_test": (float(search_best_test.iloc[0]) if len(search_best_test)
                                 else None),
        "lightgbm_default_test": lightgbm_default(run_dir),
        "debug_fixed": fixed,
        "debugs": debugs,
        "run_dir": str(run_dir),
    }


def verdict(row: dict[str, Any], higher: bool) -> str:
    best, base = row["best_test"], row["baseline_test"]
    if best is None or base is None:
        return "n/a"
    if best == base:
        return "tie"
    return "better" if (best > base) == higher else "worse"


def table(rows: list[dict[str, Any]]) -> str:
    def f(value: Any) -> str:
        if value is None:
            return "n/a"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| task | metric | baseline root test | engine best test (valid) | operator | "
             "best-valid node test | LightGBM default test | vs root | debug fixed | "
             "nodes (ok LLM) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        higher = METRICS[r["metric"]].maximize
        lines.append(
            f"| {r['task']} | {r['metric']} | {f(r['baseline_test'])} | {f(r['best_test'])} "
            f"({f(r['best_valid'])}) | {r['best_operator']} | {f(r['best_valid_node_test'])} | "
            f"{f(r['lightgbm_default_test'])} | {verdict(r, higher)} | "
            f"{r['debug_fixed']}/{r['debugs']} | {r['nodes']} ({r['ok_llm_nodes']}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shared_flags(parser, suite="lite", budget="15m", llm="llama", out="runs/quality",
                     out_help="where runs and the table go")
    args, extra = parser.parse_known_args(argv)
    out = args.out
    saved = out / "quality.json"
    try:
        results = saved_results(saved, args.budget)
    except UserError as exc:
        return error_exit(exc)
    done = {r["task"] for r in results}
    for dataset in suite(args.suite):
        if dataset.name in done:
            print(f"== {dataset.name}: already in {saved}", flush=True)
            continue
        task_out = out / dataset.name
        print(f"== {dataset.name}: {args.budget}", flush=True)
        code, run_dir = run_engine(["--data", str(dataset.path), "--target", dataset.target,
                                    "--budget", args.budget, "--llm", args.llm, *extra],
                                   task_out)
        if run_dir is None:
            return code
        results.append({**measure(dataset, run_dir), "budget": args.budget})
        saved.write_text(json.dumps(results, indent=2))
        (out / "quality.md").write_text(table(results) + "\n")
    if results:
        print(table(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
