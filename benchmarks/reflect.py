"""Does a reflection before debug and improve steps (Reflexion, seed 001) make them succeed?

    python -m benchmarks.reflect [--suite lite] [--budget 10m] [--seeds 1] [--llm llama]
                                 [--arms plain,reflect] [--out runs/reflect] [engine flags...]

For each task and seed of the suite: one `engine.run` per arm, same budget and seed: `plain`
(no flag), `reflect` (`--reflect`) and, when asked for, `analyst` (`--analyst`: the data
analyst's findings in every prompt, seed 003). From each run's Parquet rows: the share of drafts
whose code ran ok, of debug steps whose code ran ok, and of improve steps that beat their
parent's valid score. Steps stopped at the budget deadline or lost to a worker are left out of
these counts (they never got their chance). Also reported: nodes, tokens per node (a reflection
costs a call) and the test score of the node the run handed over.
The **all** rows give 95% Wilson intervals of the pooled shares.
Prints a markdown table and writes it, with the raw numbers as JSON, under --out, after every
run: run again with the same --out and it resumes, skipping the (task, seed, arm) runs already
there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.cli import add_shared_flags
from benchmarks.datasets import suite
from benchmarks.slice import run_engine, saved_results
from benchmarks.stats import share
from common.errors import UserError, error_exit
from engine.records.runs import open_run

ARMS: dict[str, list[str]] = {"plain": [], "reflect": ["--reflect"], "analyst": ["--analyst"]}


def step_success(rows: pd.DataFrame) -> dict[str, int]:
    """Drafts and debug steps that ran ok and improve steps that beat their parent, out of those
    that finished (not killed at the deadline, not lost)."""
    done = rows[~rows.status.isin(["killed", "lost"])]
    metric = rows.set_index("node_id").metric
    drafts = done[done.operator == "draft"]
    debugs = done[done.operator == "debug"]
    improves = done[done.operator == "improve"]
    # astype: mapping an empty column of ids gives a string column, which cannot be compared
    parent_metric = improves.parent_id.map(metric).astype(float)
    improved = (improves.status == "ok") & parent_metric.notna() & (improves.metric > parent_metric)
    return {
        "drafts": len(drafts), "drafts_ok": int((drafts.status == "ok").sum()),
        "debugs": len(debugs), "debug_fixed": int((debugs.status == "ok").sum()),
        "improves": len(improves), "improved": int(improved.sum()),
    }


def measure(task: str, seed: int, arm: str, run_dir: Path) -> dict[str, Any]:
    run = open_run(run_dir)
    rows = pd.DataFrame(run.rows)
    result = run.manifest.get("result", {})
    tokens = int((rows.prompt_tokens + rows.completion_tokens).sum())
    llm_nodes = int((rows.operator != "baseline").sum())
    return {
        "task": task, "seed": seed, "arm": arm, "nodes": len(rows),
        "reflections": int((rows.reflection.fillna("") != "").sum()),
        "tokens_per_llm_node": tokens / llm_nodes if llm_nodes else None,
        "best_test": result.get("best_test"), "run_dir": str(run_dir),
        **step_success(rows),
    }


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "0/0"


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| task | seed | arm | drafts ok | debugs fixed | improves that improved | nodes | "
             "tokens/LLM node | answer's test |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        tokens = "n/a" if r["tokens_per_llm_node"] is None else f"{r['tokens_per_llm_node']:.0f}"
        best = "n/a" if r["best_test"] is None else f"{r['best_test']:.4g}"
        # .get: results saved before drafts were counted
        lines.append(f"| {r['task']} | {r['seed']} | {r['arm']} | "
                     f"{_share(r.get('drafts_ok', 0), r.get('drafts', 0))} | "
                     f"{_share(r['debug_fixed'], r['debugs'])} | "
                     f"{_share(r['improved'], r['improves'])} | {r['nodes']} | {tokens} | "
                     f"{best} |")
    for arm in ARMS:
        mine = [r for r in results if r["arm"] == arm]
        if mine:
            total = {k: sum(r.get(k, 0) for r in mine) for k in
                     ("drafts_ok", "drafts", "debug_fixed", "debugs", "improved", "improves",
                      "nodes")}
            drafts = share(total["drafts_ok"], total["drafts"])
            debugs = share(total["debug_fixed"], total["debugs"])
            improves = share(total["improved"], total["improves"])
            lines.append(f"| **all** | | **{arm}** | {drafts} | {debugs} | {improves} | "
                         f"{total['nodes']} | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shared_flags(parser, suite="lite", budget="10m", budget_help="search budget per run",
                     llm="llama", out="runs/reflect", out_help="where runs and the table go")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per task and arm (default 1)")
    parser.add_argument("--arms", default="plain,reflect",
                        help=f"comma-separated arms, of {', '.join(ARMS)} (default plain,reflect)")
    args, extra = parser.parse_known_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        print(f"error: unknown arm {', '.join(unknown) or args.arms!r}; arms: {', '.join(ARMS)}",
              file=sys.stderr)
        return 2
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "reflect.json"
    try:
        results = saved_results(saved, args.budget)
    except UserError as exc:
        return error_exit(exc)
    done = {(r["task"], r["seed"], r["arm"]) for r in results}
    for dataset in suite(args.suite):
        for seed in range(args.seeds):
            for arm in arms:
                if (dataset.name, seed, arm) in done:
                    print(f"== {dataset.name} seed {seed} {arm}: already in {saved}", flush=True)
                    continue
                run_out = out / arm / dataset.name
                print(f"== {dataset.name} seed {seed} {arm}: {args.budget}", flush=True)
                code, run_dir = run_engine(
                    ["--data", str(dataset.path), "--target", dataset.target, "--budget",
                     args.budget, "--llm", args.llm, "--seed", str(seed), *ARMS[arm], *extra],
                    run_out)
                if run_dir is None:
                    return code
                results.append({**measure(dataset.name, seed, arm, run_dir),
                                "budget": args.budget})
                saved.write_text(json.dumps(results, indent=2))
                (out / "reflect.md").write_text(table(results) + "\n")
    print(table(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
