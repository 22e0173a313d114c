"""How often does the data analyst's exploration script run (`--analyst`, seed 003)?

    python -m benchmarks.analysis [--suite lite] [--samples 3] [--llm llama] [--out DIR]

For each task of the suite (split as `engine.run` splits it, seed 0), `--samples` first
attempts of the analysis step, each the engine's own `engine.step.Step` driven one call at a
time (its prompt, a different sampling seed each, one re-ask when the reply has no usable
code), the script run in the sandbox. An attempt succeeds when the script exits 0 and
prints something: the findings every later prompt would see. Writes `analysis.md` (share per
task, 95% Wilson interval overall) and `attempts.jsonl` (script, error, findings) under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from actors.llm import LLM
from benchmarks.cli import add_shared_flags
from benchmarks.datasets import suite
from benchmarks.debug_pairs import in_process_llm, replay_step
from benchmarks.stats import share
from common.errors import UserError, error_exit
from engine.search_context import SearchContext
from engine.search_run import task_context
from engine.step import Step
from engine.task.prepare import TaskSpec, prepare_task
from operators.analyst import next_analysis, trim_findings
from search.journal import Journal
from search.node import Status


def attempts(task_name: str, data: Path, target: str, llm: LLM, samples: int,
             ) -> list[dict[str, Any]]:
    task = prepare_task(TaskSpec(data, target, None, None, ""))
    ctx = task_context(task, 0)
    rows = []
    for sample in range(samples):
        first = next_analysis(Journal())
        assert first is not None  # an empty journal always owes its first analysis
        node = replay_step(Step(first, SearchContext(task, ctx, Journal(), requests=sample)), llm)
        ok = node.status is Status.OK
        rows.append({"task": task_name, "sample": sample, "ok": ok, "error": node.error[:300],
                     "findings": trim_findings(node.stdout_tail), "code": node.code})
        print(f"{task_name} #{sample}: {'ok' if ok else node.error[:100]}", flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | scripts that ran and printed (all: 95% CI) |", "|---|---|"]
    for name in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == name]
        lines.append(f"| {name} | {sum(r['ok'] for r in mine)}/{len(mine)} |")
    lines.append(f"| **all** | {share(sum(r['ok'] for r in rows), len(rows))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shared_flags(parser, suite="lite", llm="llama", out="runs/analysis",
                     out_help="where analysis.md and attempts.jsonl go")
    parser.add_argument("--samples", type=int, default=3,
                        help="first attempts per task (default 3)")
    args = parser.parse_args(argv)
    try:
        if args.samples < 1:
            raise UserError("--samples must be at least 1")
        datasets = suite(args.suite)
        llm = in_process_llm(args.llm)
    except UserError as exc:
        return error_exit(exc)
    rows = []
    for dataset in datasets:
        rows += attempts(dataset.name, dataset.path, dataset.target, llm, args.samples)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "attempts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = table(rows)
    (args.out / "analysis.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
