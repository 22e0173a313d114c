"""Command line: `python -m engine.run --data FILE.csv --target COL [...]`.

Bad input ends with one line on stderr and exit code 2 before anything is written under the
output folder; the engine's own failures exit 1; Ctrl-C stops gracefully (exit 130) with every
finished node stored.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from engine.config import RunConfig, load_task_yaml, merge, parse_budget
from engine.report import summary_facts, write_summary
from engine.store import RunStore
from engine.task import PreparedTask, TaskSpec, prepare_task
from search.errors import EngineError, UserError
from search.journal import Journal
from search.node import Node
from search.operators import TaskContext
from search.policy import make_policy

EPILOG = """examples:
  python -m engine.run --data benchmarks/data/concrete-strength/concrete.csv --target strength
  python -m engine.run --task task.yaml --budget 2h
  python -m engine.run --data train.csv --target label --llm scripted:replies.json --quiet
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m engine.run", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="LLM tree search over ML scripts for a tabular task, on Ray.",
    )
    p.add_argument("--data", type=Path, help="training CSV with features and the target column")
    p.add_argument("--target", help="name of the column to predict")
    p.add_argument("--test", type=Path,
                   help="optional CSV used as the hidden test split (same columns as --data)")
    p.add_argument("--metric", help="f1 | f1_weighted | accuracy | roc_auc | log_loss | rmse | "
                                    "mae | r2 (default: f1 binary, f1_weighted multiclass, "
                                    "rmse regression)")
    p.add_argument("--task", type=Path,
                   help="task.yaml holding any of these flags as keys (flags given win)")
    p.add_argument("--budget", help="wall-clock budget: 90s, 10m, 2h (default 10m)")
    p.add_argument("--max-nodes", type=int, help="stop after this many nodes")
    p.add_argument("--executors", type=int,
                   help="parallel sandboxed executors (default: cores - 1, at least 1)")
    p.add_argument("--llm", help="llama (embedded default), llama:/path/model.gguf, "
                                 "or scripted:FILE.json (replay, for tests)")
    p.add_argument("--policy", help="search policy (default greedy)")
    p.add_argument("--seed", type=int, help="seed for splits, policy and sampling (default 0)")
    p.add_argument("--out", type=Path, help="folder for run directories (default runs/)")
    p.add_argument("--exec-timeout", type=float,
                   help="seconds one candidate script may run (default 300)")
    p.add_argument("--quiet", action="store_true", default=None,
                   help="plain log lines instead of the live display")
    return p


def config_from_args(args: argparse.Namespace) -> RunConfig:
    base = load_task_yaml(args.task) if args.task else RunConfig()
    overrides: dict[str, Any] = {
        "data": args.data, "target": args.target, "test": args.test, "metric": args.metric,
        "max_nodes": args.max_nodes, "executors": args.executors, "llm": args.llm,
        "policy": args.policy, "seed": args.seed, "out": args.out,
        "exec_timeout": args.exec_timeout, "quiet": args.quiet,
        "budget": parse_budget(args.budget) if args.budget is not None else None,
    }
    return merge(base, overrides).validate()


def task_context(task: PreparedTask, seed: int) -> TaskContext:
    return TaskContext(
        preview=task.preview(), target=task.target, task_type=task.task_type,
        metric=task.metric.name, maximize=task.metric.maximize, labels=task.labels,
        needs_proba=task.metric.needs_proba, seed=seed,
    )


def llm_options(config: RunConfig) -> dict[str, Any]:
    """Resolve what the LLM actors need before any run directory exists: a missing extra or
    model is reported here, and the embedded GGUF is assembled once in the driver."""
    if config.llm.split(":", 1)[0] != "llama":
        return {}
    from actors.model_assets import embedded_model_path

    path = config.llm.partition(":")[2] or str(embedded_model_path())
    if not Path(path).is_file():
        raise UserError(f"model file {path} not found; pass --llm llama:/path/to/model.gguf")
    return {"model_path": path, "seed": config.seed}


class Progress:
    """The live status line (or plain log lines with --quiet)."""

    def __init__(self, console: Console, task: PreparedTask, budget_end: float) -> None:
        self.console = console
        self.task = task
        self.budget_end = budget_end
        self.started = time.monotonic()
        self.journal: Journal | None = None
        self.tokens = 0

    def node(self, node: Node, journal: Journal, tokens: int) -> None:
        self.journal, self.tokens = journal, tokens
        name = self.task.metric.name
        metric = "" if node.metric_raw is None else f" {name}={node.metric_raw:.5g}"
        error = f"  {node.error[:100]}" if node.error else ""
        self.console.print(
            f"[{time.monotonic() - self.started:6.0f}s] {node.operator.value:<8} "
            f"{node.node_id} {node.status.value}{metric}{error}",
            markup=False, highlight=False,
        )

    def __rich__(self) -> Text:
        left = max(0.0, self.budget_end - time.monotonic())
        elapsed = max(1e-9, time.monotonic() - self.started)
        journal = self.journal
        best = journal.best() if journal else None
        counts = journal.status_counts() if journal else {}
        shown = " ".join(f"{k} {v}" for k, v in counts.items() if v)
        best_text = "-" if best is None else f"{best.metric_raw:.5g}"
        return Text(
            f"nodes {len(journal) if journal else 0} ({shown or 'none yet'}) | best valid "
            f"{self.task.metric.name} {best_text} | {self.tokens / elapsed:.1f} tok/s | "
            f"budget left {left:.0f}s",
            style="bold",
        )


def versions() -> dict[str, str]:
    out = {}
    for name in ("ray", "pandas", "scikit-learn", "lightgbm", "numpy", "llama-cpp-python"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def run(config: RunConfig, console: Console) -> Path:
    from engine.loop import Budget, SearchLoop

    if config.data is None or config.target is None:  # validate() guarantees both
        raise UserError("no data: pass --data FILE.csv --target COLUMN")
    spec = TaskSpec(config.data, config.target, config.test, config.metric, config.description)
    task = prepare_task(spec, seed=config.seed)
    options = llm_options(config)
    policy = make_policy(config.policy, seed=config.seed, num_drafts=config.num_drafts,
                         debug_prob=config.debug_prob, max_debug_depth=config.max_debug_depth)
    from sandbox import isolation_mode

    started = time.time()
    store = RunStore.create(config.out, task, {
        "config": config.to_json(), "target": task.target, "task_type": task.task_type,
        "metric": task.metric.name, "versions": versions(), "isolation": isolation_mode(),
        "starts": [{"at": started, "budget": config.budget}],
    })
    console.print(f"run {store.run_id}: {task.task_type} task, target {task.target!r}, metric "
                  f"{task.metric.name}; {len(task.train)} train rows; output {store.root}")
    journal = Journal()
    budget = Budget(config.budget, config.max_nodes)
    progress = Progress(console, task, time.monotonic() + config.budget)

    import ray

    from actors.workers import start_executors, start_llm_actors

    cores = os.cpu_count() or 2
    ray.init(num_cpus=max(cores, config.executors + 1), include_dashboard=False,
             object_store_memory=100 * 2**20, log_to_driver=False,
             configure_logging=False)
    interrupted = False
    stats = None
    try:
        llms = start_llm_actors(config.llm, 1, options)
        execs = start_executors(config.executors)
        model = ray.get(llms[0].model.remote())  # surfaces a load failure before the loop
        store.update_manifest(model=model)
        loop = SearchLoop(
            task=task, ctx=task_context(task, config.seed), store=store, journal=journal,
            policy=policy, llm_actors=llms, llm_names=["llm-0"], executors=execs,
            budget=budget, exec_timeout=config.exec_timeout,
            on_node=lambda node, s: progress.node(node, journal,
                                                  s.prompt_tokens + s.completion_tokens),
        )
        try:
            if config.quiet:
                stats = asyncio.run(loop.run())
            else:
                with Live(progress, console=console, refresh_per_second=2, transient=True):
                    stats = asyncio.run(loop.run())
        except KeyboardInterrupt:
            interrupted = True
            stats = loop.stats
    finally:
        ray.shutdown()
    spent = {
        "seconds": time.time() - started, "budget": config.budget, "nodes": len(journal),
        "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.completion_tokens,
        "llm_seconds": stats.llm_seconds, "repairs": stats.repairs,
        "duplicates": stats.duplicates, "interrupted": interrupted,
    }
    facts = summary_facts(journal, stats.test_scores, spent)
    store.update_manifest(spent=spent, result=facts)
    summary = write_summary(store.root, task, journal, stats.test_scores, facts)
    console.print(summary.read_text(), markup=False, highlight=False)
    if interrupted:
        raise KeyboardInterrupt
    return store.root


def main(argv: list[str] | None = None) -> int:
    console = Console(soft_wrap=True)
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        run(config, console)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopped by Ctrl-C; finished nodes are stored", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
