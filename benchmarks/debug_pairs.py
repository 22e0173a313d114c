"""Does a reflection make a debug step fix its parent? Paired: the same failed nodes, debugged
with and without a reflection first (Reflexion, seed 001).

    python -m benchmarks.debug_pairs RUN_OR_FOLDER... [--llm llama] [--samples 1]
                                     [--max-parents 40] [--exec-timeout 300] [--out DIR]

`benchmarks.reflect` compares whole runs, so each arm debugs different parents (its own drafts
fail in their own ways) and a handful of debug steps per run decides the share. Here every
failed node of the given runs (status `buggy`, with code: what a debug step starts from) is
debugged `--samples` times in each arm, `plain` and `reflect` (`--reflect`: a reflection call,
then the debug prompt with the reflection in it), at the greedy policy's temperature for that
debug depth, the code run in the sandbox on the run's own task. A debug attempt fixes its
parent when its code runs and its submission scores.

Each attempt is the engine's own `engine.step.Step`, driven one call at a time: its prompts,
its sampling seed (run seed, journal size and request number; the sample is the request), its
repair re-ask and its scoring; code repeating a stored node is run all the same, since each
sample is measured. Attempts are appended to
`attempts.jsonl` under --out as they finish; run again with the same --out to resume. The
table (`debug_pairs.md`) gives each arm's share of fixes with a 95% Wilson interval, per task,
and a two-sided exact sign test over the parents where the arms' fix counts differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from actors.llm import LLM, make_llm, parse_spec
from benchmarks.cli import add_shared_flags
from benchmarks.stats import share, sign_test
from common.errors import UserError, error_exit
from engine.export import runs_in
from engine.records.runs import open_run
from engine.search_context import SearchContext
from engine.search_run import task_context
from engine.step import Step, run_step
from engine.task.prepare import PreparedTask
from operators.analyst import analysis_findings
from operators.context import TaskContext
from sandbox import run_script
from search.greedy import debug_temperature
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal

ARMS = ("plain", "reflect")
BASE_TEMPERATURE = 0.7  # the greedy policy's default


@dataclass(frozen=True, eq=False)  # compared by identity: it holds DataFrames
class Case:
    """One failed node to debug, with what its prompts need."""

    task_name: str
    run_dir: Path
    parent: Node
    journal: Journal
    task: PreparedTask
    ctx: TaskContext

    @property
    def key(self) -> str:
        return f"{self.parent.run_id}/{self.parent.node_id}"


def load_cases(paths: Sequence[Path]) -> list[Case]:
    """The failed nodes of every run under `paths`, in run order, one per distinct code."""
    cases: list[Case] = []
    seen: set[str] = set()
    for run_dir in [run for path in paths for run in runs_in(path)]:
        run = open_run(run_dir)
        task = run.task()
        ctx = replace(task_context(task, int(run.manifest.get("config", {}).get("seed", 0))),
                      findings=analysis_findings(run.journal))
        name = Path(str(run.manifest.get("config", {}).get("data") or run_dir.name)).stem
        for node in run.journal:
            if (node.status is Status.BUGGY and node.is_repairable
                    and node.code_hash not in seen):
                seen.add(node.code_hash)
                cases.append(Case(name, run_dir, node, run.journal, task, ctx))
    return cases


def spread(cases: list[Case], limit: int | None) -> list[Case]:
    """At most `limit` cases, taken round-robin over tasks so every task is represented, then
    grouped by task: consecutive prompts of one task share their prefix in llama.cpp's cache."""
    by_task: dict[str, list[Case]] = {}
    for case in cases:
        by_task.setdefault(case.task_name, []).append(case)
    queues = [list(q) for q in by_task.values()]
    chosen: list[Case] = []
    while any(queues) and (limit is None or len(chosen) < limit):
        for queue in queues:
            if queue and (limit is None or len(chosen) < limit):
                chosen.append(queue.pop(0))
    return [case for group in by_task.values() for case in group if case in chosen]


def attempt(case: Case, arm: str, sample: int, llm: LLM, exec_timeout: float) -> dict[str, Any]:
    """One debug step of `case.parent` in `arm`, run and scored by the engine's own `Step`."""
    parent = case.parent
    depth = case.journal.debug_depth(parent.node_id) + 1
    proposal = Proposal(Operator.DEBUG, parent.node_id,
                        debug_temperature(BASE_TEMPERATURE, depth))
    search = SearchContext(case.task, case.ctx, case.journal, exec_timeout=exec_timeout,
                           reflect=arm == "reflect", skip_duplicates=False, requests=sample)
    node = replay_step(Step(proposal, search), llm)
    return {
        "case": case.key, "task": case.task_name, "parent_id": parent.node_id,
        "parent_operator": parent.operator.value, "debug_depth": depth, "arm": arm,
        "sample": sample, "fixed": node.status is Status.OK, "status": node.status.value,
        "error": node.error[:300], "metric_raw": node.metric_raw,
        "reflection": node.reflection, "tokens": node.prompt_tokens + node.completion_tokens,
        "llm_seconds": round(node.llm_seconds, 2), "exec_seconds": round(node.exec_seconds, 2),
    }


def replay(cases: Iterable[Case], llm: LLM, out: Path, samples: int = 1,
           exec_timeout: float = 300.0) -> list[dict[str, Any]]:
    """Every (case, sample, arm) attempt not yet in `out/attempts.jsonl`, appended as it
    finishes; returns all attempts there."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "attempts.jsonl"
    done = read_attempts(path)
    have = {(a["case"], a["arm"], a["sample"]) for a in done}
    for case in cases:
        for sample in range(samples):
            for arm in ARMS:
                if (case.key, arm, sample) in have:
                    continue
                start = time.perf_counter()
                row = attempt(case, arm, sample, llm, exec_timeout)
                with path.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                done.append(row)
                print(f"{case.task_name} {case.parent.node_id} {arm} #{sample}: "
                      f"{'fixed' if row['fixed'] else row['status']} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
    return done


def read_attempts(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _fixed(rows: list[dict[str, Any]]) -> str:
    return share(sum(r["fixed"] for r in rows), len(rows))


def summary(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-case fix counts of both arms (cases with both arms complete), and the sign test."""
    fixes: dict[str, dict[str, list[bool]]] = {}
    for a in attempts:
        fixes.setdefault(a["case"], {}).setdefault(a["arm"], []).append(bool(a["fixed"]))
    paired = {case: arms for case, arms in fixes.items()
              if all(len(arms.get(arm, [])) == len(arms[ARMS[0]]) for arm in ARMS)}
    better = sum(sum(a["reflect"]) > sum(a["plain"]) for a in paired.values())
    worse = sum(sum(a["reflect"]) < sum(a["plain"]) for a in paired.values())
    return {"parents": len(paired), "reflect_better": better, "reflect_worse": worse,
            "same": len(paired) - better - worse, "p_value": sign_test(better, worse)}


def table(attempts: list[dict[str, Any]]) -> str:
    tasks = sorted({a["task"] for a in attempts})
    lines = ["| task | parents | plain: fixed (95% CI) | reflect: fixed (95% CI) | "
             "tokens per attempt (plain / reflect) |", "|---|---|---|---|---|"]
    for name in [*tasks, None]:
        mine = [a for a in attempts if name is None or a["task"] == name]
        by_arm = {arm: [a for a in mine if a["arm"] == arm] for arm in ARMS}
        tokens = " / ".join(
            f"{sum(a['tokens'] for a in rows) / len(rows):.0f}" if rows else "n/a"
            for rows in by_arm.values())
        label = "**all**" if name is None else name
        lines.append(f"| {label} | {len({a['case'] for a in mine})} | "
                     f"{_fixed(by_arm['plain'])} | {_fixed(by_arm['reflect'])} | {tokens} |")
    s = summary(attempts)
    lines.append("")
    lines.append(f"Paired over {s['parents']} parents: reflect fixed more often on "
                 f"{s['reflect_better']}, less often on {s['reflect_worse']}, as often on "
                 f"{s['same']}; two-sided exact sign test p = {s['p_value']:.3g}.")
    return "\n".join(lines)


def replay_step(step: Step, llm: LLM) -> Node:
    """Drive an engine step in this process: `llm` answers, each run goes to the sandbox."""
    inputs = step.search.inputs
    return run_step(step, lambda prompt: llm.generate([prompt])[0],
                    lambda code, fold, limits: run_script(code, inputs(fold), limits)).node


def in_process_llm(spec: str) -> LLM:
    """An LLM called in this process (no Ray): llama on every core, openai, or scripted."""
    kind, _ = parse_spec(spec)
    if kind == "vllm":
        raise UserError("this benchmark calls its LLM in-process: use llama, "
                        "openai:BASE_URL#MODEL (e.g. a vLLM server) or scripted:FILE.json")
    options: dict[str, object] = {}
    if kind == "llama":  # nothing else runs while it generates: every core
        options = {"n_threads": os.cpu_count() or 1, "seed": 0}
    elif kind == "openai":
        options = {"api_key": os.environ.get("OPENAI_API_KEY") or None}
    return make_llm(spec, **options)  # type: ignore[return-value]  # vllm, the async one, is out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path,
                        help="run directories, or folders holding them (e.g. runs/reflect)")
    add_shared_flags(parser, llm="llama", out="runs/debug-pairs",
                     out_help="where attempts.jsonl and debug_pairs.md go")
    parser.add_argument("--samples", type=int, default=1,
                        help="debug attempts per parent and arm (default 1)")
    parser.add_argument("--max-parents", type=int, default=None,
                        help="at most this many failed nodes, spread over tasks (default all)")
    parser.add_argument("--exec-timeout", type=float, default=300.0,
                        help="seconds one debugged script may run (default 300, as engine.run)")
    args = parser.parse_args(argv)
    try:
        if args.samples < 1 or (args.max_parents is not None and args.max_parents < 1):
            raise UserError("--samples and --max-parents must be at least 1")
        cases = spread(load_cases(args.runs), args.max_parents)
        if not cases:
            raise UserError("the runs hold no failed node with code to debug")
        print(f"{len(cases)} failed nodes x {args.samples} sample(s) x {len(ARMS)} arms",
              flush=True)
        attempts = replay(cases, in_process_llm(args.llm), args.out, args.samples,
                          args.exec_timeout)
    except UserError as exc:
        return error_exit(exc)
    text = table(attempts)
    (args.out / "debug_pairs.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
