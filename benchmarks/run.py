"""Benchmark suite runner: every (task, fold, method, seed) once, one Parquet row each.

    python -m benchmarks.run --suite lite --policies greedy,mcts,sela \\
        --baselines lgbm,optuna,autogluon,flaml --seeds 3 --budget 10m [--protocol amlb|sela] \\
        [--outer-folds N] [--llm SPEC] [--floor-arm] [--address auto] [--out DIR] \\
        [ENGINE FLAGS...]

A policy is one `engine.run` search with `--policy NAME --seed S --metric M`; a baseline is
fitted here (`benchmarks.baselines`). The protocol names the metric of each task type (`sela`:
F1, weighted F1, RMSE; `amlb`: ROC AUC, log loss, RMSE), the same for every method. Folds: with
`--outer-folds 1` (the default) each task has the engine's own split (`--split-seed`, test 20 %);
with `--outer-folds N` the rows are cut into N outer folds (stratified for classes, seeded by
`--split-seed`), and fold F's rows are the test split of fold F, given to the engine as `--test`
(it splits the rest into train and valid as usual), as AMLB's 10-fold protocol does. Seeds vary
the search only (policy, LLM sampling, library seeds), as SELA keeps its splits fixed; so every
method and seed of a fold sees byte-identical data (`data_hash` in each row). Baselines get the
same wall-clock budget (`--baseline-budget` to change it) and learn from the same rows (train +
valid). Unknown flags go to every engine run (e.g. `--max-nodes 20`).

`--floor-arm` adds the method `floor`: the same engine search with `--llm none` (no LLM
started; the floor alone), once per task, fold and seed, so that the report can pair the
answer with and without the LLM (its LLM-gain table). The core the LLM actor holds in the
other searches is one more executor there, as `engine.run --llm none` does. Each search's row
also counts its feature programs (proposed, refused by the checks, failed, scored, kept), their
median LLM seconds, and whether the answer trains on a kept one.

`--program-arms expert,null` adds those methods: the same search with fixed feature programs
as its LLM's replies (`benchmarks.program_arms`: hand-written expert programs, and null ones
that add nothing a tree can use), with the floor arm's CPUs. The expert arm is the ceiling the
report reads the LLM's gain against; the null arm's keeps are the gate's false keeps.

Rows go to OUT/results.parquet (rewritten whole after each job, by rename), fold files to
OUT/folds/<task>/fold<F>/, run directories to OUT/runs/<task>/fold<F>/<method>/seed<S>/. One OUT
holds one protocol, fold count and split seed: a command that names others is refused. Rerunning
the same command skips rows already there with status ok, and measures a finished run directory
instead of searching again. With `--address`
the jobs run as Ray tasks on that cluster, `--parallel` at a time (engine runs as subprocesses
joining the cluster; OUT must be on storage every node can write for their directories to
gather in one place — the rows come back either way). Locally they run one after another.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from actors.llm import NO_LLM
from benchmarks.baselines import BASELINES
from benchmarks.cli import add_shared_flags
from benchmarks.datasets import PROTOCOLS, Dataset, suite
from benchmarks.program_arms import ARMS, arm_programs, scripted_replies
from benchmarks.table import (
    RESULTS,
    add_row,
    check_same_suite,
    load_results,
    measure_run,
    save_results,
)
from common.errors import EngineError, UserError, error_exit
from engine.config import parse_budget
from engine.evaluation.folds import fold_splitter
from engine.records.store import RunStore
from engine.task.prepare import TaskSpec, prepare_task
from fileio import write_atomic
from search.policy import available

# The method of the LLM-gain arm: an engine search with `--llm none` (its policy is never
# asked for anything, so one arm serves every policy).
FLOOR = "floor"
@dataclass(frozen=True)
class Job:
    task: str
    method: str
    kind: str  # "policy" | "baseline"
    seed: int
    fold: int = 0

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.task, self.method, self.seed, self.fold)

    def folder(self, out: Path) -> Path:
        return out / "runs" / self.task / f"fold{self.fold}" / self.method / f"seed{self.seed}"


@dataclass(frozen=True)
class Settings:
    budget: float
    baseline_budget: float
    split_seed: int
    llm: str
    executors: int
    address: str | None
    engine_args: tuple[str, ...]
    protocol: str = "sela"
    outer_folds: int = 1


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev off: an engine flag must never be taken for a prefix of ours (--seed/--seeds).
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", allow_abbrev=False,
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Unknown flags are passed to every engine run.")
    add_shared_flags(
        p, suite="lite",
        suite_help="smoke, lite, full, or comma-separated dataset names (default lite)",
        budget="10m", budget_help="wall-clock budget per search",
        llm="llama", llm_help="LLM spec for the searches (default llama)",
        out="runs/bench",
        out_help="results.parquet and run directories go here (default runs/bench)")
    p.add_argument("--policies", default="greedy,mcts,sela",
                   help="comma-separated search policies; empty for none "
                        "(default greedy,mcts,sela)")
    p.add_argument("--baselines", default="lgbm,optuna",
                   help="comma-separated non-LLM baselines: lgbm, optuna, autogluon, flaml "
                        "(the last two need the bench extra); empty for none (default "
                        "lgbm,optuna)")
    p.add_argument("--protocol", default="sela",
                   help="metrics per task type: sela (F1, weighted F1, RMSE) or amlb (ROC AUC, "
                        "log loss, RMSE) (default sela)")
    # Not --folds: that engine flag (cross-validation folds inside a search) passes through.
    p.add_argument("--outer-folds", type=int, default=1,
                   help="outer folds per task, each a different test split (AMLB uses 10); "
                        "1: the engine's own split (default 1)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per task and method")
    p.add_argument("--baseline-budget",
                   help="wall-clock budget of each baseline (default: --budget)")
    p.add_argument("--split-seed", type=int, default=0,
                   help="seed of every task's train/valid/test split (default 0)")
    p.add_argument("--executors", type=int, default=1,
                   help="sandboxed executors per search (default 1)")
    p.add_argument("--address", help="Ray cluster to run the jobs on (e.g. auto); "
                                     "default: one after another on this machine")
    p.add_argument("--parallel", type=int,
                   help="jobs at once on the cluster (default: cluster CPUs / (executors + 1))")
    p.add_argument("--floor-arm", action="store_true",
                   help=f"also run method {FLOOR!r}: the same engine search with --llm none "
                        "(the floor alone), for the report's LLM-gain table")
    p.add_argument("--program-arms", default="",
                   help=f"also run these methods ({', '.join(ARMS)}): the same search with "
                        "fixed feature programs as the LLM's replies (benchmarks/program_arms.py)")
    return p


def plan_jobs(datasets: list[Dataset], policies: list[str], baselines: list[str],
              seeds: int, folds: int = 1, *, floor_arm: bool = False,
              program_arms: tuple[str, ...] = ()) -> list[Job]:
    """Seed-major, then fold-major, so a stopped suite has every method's first seed and fold
    before any second; the program arms and the floor arm right after the searches they are
    paired with."""
    searches = [*policies, *program_arms, *([FLOOR] if floor_arm else [])]
    return [Job(d.name, m, kind, s, f) for s in range(seeds) for f in range(folds)
            for d in datasets for kind, methods in (("baseline", baselines), ("policy", searches))
            for m in methods]


# Flags the runner sets on every engine run itself; passing them as extra flags is an error.
MANAGED = ("--data", "--target", "--test", "--task", "--resume", "--policy", "--seed",
           "--split-seed", "--budget", "--llm", "--executors", "--out", "--address", "--metric",
           "--no-save-model")


def check_engine_args(extra: list[str], *, floor_arm: bool = False) -> None:
    """Extra flags must be engine flags the runner does not set itself; checked once, up front,
    so a typo fails the command instead of every run. With the floor arm they must also leave
    a search without an LLM something to run (e.g. not --no-floor --no-baseline)."""
    from engine.run import build_parser as engine_parser
    from engine.run import config_from_args

    clash = [a for a in extra if a.split("=", 1)[0] in MANAGED]
    if clash:
        raise UserError(f"{', '.join(clash)} is set by the runner; use its own flags instead")
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            engine_parser().parse_args(["--data", "x.csv", "--target", "y", *extra])
    except SystemExit as exc:
        reason = (said.getvalue().strip().splitlines() or [""])[-1]
        raise UserError(f"bad engine flags {' '.join(extra)!r} ({reason}); see "
                        "python -m engine.run --help") from exc
    if floor_arm:
        args = engine_parser().parse_args(["--data", "x.csv", "--target", "y", *extra,
                                           "--llm", NO_LLM])
        try:
            config_from_args(args)
        except UserError as exc:
            raise UserError(f"the {FLOOR} arm (--llm {NO_LLM}): {exc}") from exc


def _names(text: str, known: list[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


# ---- one job ---------------------------------------------------------------------------------


def run_job(job: Job, dataset: Dataset, settings: Settings, out: Path) -> dict[str, Any]:
    """Run one job and return its row; a failure is a row with status `failed`."""
    started = time.time()
    base = {"task": job.task, "task_type": dataset.task_type, "method": job.method,
            "kind": job.kind, "seed": job.seed, "protocol": settings.protocol, "fold": job.fold,
            "outer_folds": settings.outer_folds, "split_seed": settings.split_seed,
            "metric": dataset.metric(settings.protocol), "cores": os.cpu_count(),
            "started_at": started}
    try:
        data, test = fold_files(dataset, job.fold, settings, out)
        if job.kind == "baseline":
            row = _run_baseline(job, dataset, settings, out, data, test)
        else:
            row = _run_policy(job, dataset, settings, out, data, test)
        return {**base, "status": "ok", "error": "", **row}
    except Exception as exc:  # one failed job must not end a suite of hours
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return {**base, "status": "failed", "error": detail[:500], "finished_at": time.time()}


def fold_files(dataset: Dataset, fold: int, settings: Settings, out: Path) -> tuple[Path,
                                                                                      Path | None]:
    """The data file and test file of one outer fold: with one fold, the dataset as shipped and
    no test file (the engine splits off its own); else the rows outside fold `fold` and the rows
    in it, written once under OUT/folds/ and reused, so every method reads the same bytes.

    Rows are copied as the CSV's own fields (no parsing into numbers and back), stratified by the
    target's text for classes; the folds are a function of the file and `--split-seed` alone."""
    if settings.outer_folds == 1:
        return dataset.path, None
    folder = out / "folds" / dataset.name / f"fold{fold}"
    data, test = folder / dataset.file, folder / f"test-{dataset.file}"
    if data.is_file() and test.is_file():
        return data, test
    with dataset.path.open(newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    target = [row[header.index(dataset.target)] for row in rows]
    held_out = set(outer_folds(target, dataset.task_type, settings.outer_folds,
                               settings.split_seed)[fold].tolist())
    folder.mkdir(parents=True, exist_ok=True)
    for path, keep in ((data, False), (test, True)):
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(row for i, row in enumerate(rows) if (i in held_out) == keep)
        write_atomic(path, buffer.getvalue())
    return data, test


def outer_folds(target: list[str], task_type: str, folds: int, seed: int) -> list[Any]:
    """Row indices of each outer fold's test part (sorted; together they are every row once)."""
    if folds > len(target):
        raise UserError(f"bad --outer-folds {folds}: a task has only {len(target)} rows")
    return [test for _, test in fold_splitter(task_type, folds, seed).split(target, target)]


def _run_baseline(job: Job, dataset: Dataset, settings: Settings, out: Path, data: Path,
                  test: Path | None) -> dict[str, Any]:
    metric = dataset.metric(settings.protocol)
    task = prepare_task(TaskSpec(data, dataset.target, test, metric), seed=settings.split_seed)
    folder = job.folder(out)
    if folder.exists():  # what a failed or stopped fit left (a half-saved predictor): start anew
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    started = time.time()
    result = BASELINES[job.method](task, settings.baseline_budget, job.seed, folder)
    seconds = time.time() - started  # the wall time, whatever the library says it spent
    record = {"task": job.task, "fold": job.fold, "method": job.method, "seed": job.seed,
              "protocol": settings.protocol, "metric": task.metric.name, "valid": result.valid,
              "test": result.test, "params": result.params, "fits": result.fits,
              "seconds": seconds, "budget": settings.baseline_budget,
              "data_hash": task.data_hash, "started_at": started, "curve": result.curve}
    write_atomic(folder / "result.json", json.dumps(record, indent=2, default=str) + "\n")
    return {
        "metric": task.metric.name, "valid": result.valid, "test": result.test,
        "nodes": result.fits, "ok_nodes": result.fits, "prompt_tokens": 0,
        "completion_tokens": 0, "seconds": seconds, "budget": settings.baseline_budget,
        "best_operator": job.method, "run_dir": str(folder), "data_hash": task.data_hash,
        "started_at": started, "finished_at": time.time(),
    }


def engine_argv(job: Job, dataset: Dataset, settings: Settings, folder: Path, data: Path,
                test: Path | None) -> list[str]:
    """The `engine.run` command line of one search (a program arm's replies: `arm_replies`)."""
    floor = job.method == FLOOR  # the default policy, never asked: no LLM
    arm = job.method in ARMS  # greedy, asked only for feature programs
    llm = (NO_LLM if floor else f"scripted:{arm_replies(folder)}" if arm else settings.llm)
    return ["--data", str(data), "--target", dataset.target,
            *(["--test", str(test)] if test is not None else []),
            "--metric", dataset.metric(settings.protocol),
            *([] if floor or arm else ["--policy", job.method]),
            "--seed", str(job.seed), "--split-seed", str(settings.split_seed),
            "--budget", f"{settings.budget:g}s", "--llm", llm,
            # Every arm holds the same CPUs: the one the LLM actor takes is the floor's
            # executor, and a scripted LLM takes none.
            "--executors", str(settings.executors + (1 if floor or arm else 0)),
            "--out", str(folder), "--quiet",
            # Saving the answer's model changes no score and would run past the budget; no
            # memory unless asked for (`--memory PATH` passes through): a benchmark must not
            # depend on what this machine ran before, nor add to the user's memory.
            "--no-save-model",
            *([] if any(a.split("=", 1)[0] == "--memory" for a in settings.engine_args)
              else ["--memory", "off"]),
            *settings.engine_args, *(["--llm-writes", "features"] if arm else [])]


def arm_replies(folder: Path) -> Path:
    """Where a program arm's search finds its scripted replies."""
    return folder / "replies.json"


def _run_policy(job: Job, dataset: Dataset, settings: Settings, out: Path, data: Path,
                test: Path | None) -> dict[str, Any]:
    folder = job.folder(out)
    run_dir = finished_run(folder)
    if run_dir is None:
        if job.method in ARMS:
            columns = pd.read_csv(data, nrows=1000).drop(columns=dataset.target)
            numeric = [str(c) for c in columns if pd.api.types.is_numeric_dtype(columns[c])]
            folder.mkdir(parents=True, exist_ok=True)
            scripted_replies(arm_programs(job.method, job.task, numeric), arm_replies(folder))
        before = _runs(folder)
        code = _engine(engine_argv(job, dataset, settings, folder, data, test), settings.address)
        if code != 0:
            raise RuntimeError(f"engine.run exited {code}")
        (run_dir,) = set(_runs(folder)) - set(before)
    return measure_run(run_dir) | {"budget": settings.budget}


def _engine(argv: list[str], address: str | None) -> int:
    if address is None:
        from engine.run import main as engine_main

        return engine_main(argv)
    # Inside a Ray task this process is a Ray worker: the engine must be its own driver.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]))}
    proc = subprocess.run([sys.executable, "-m", "engine.run", *argv, "--address", address],
                          env=env, check=False)
    return proc.returncode


def _runs(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def finished_run(folder: Path) -> Path | None:
    """The newest run in `folder` that ended on its own (not by Ctrl-C or a crash)."""
    for run in reversed(_runs(folder)):
        try:
            manifest = RunStore.open(run).manifest()
        except EngineError:
            continue
        if "result" in manifest and manifest.get("spent", {}).get("stopped_by") != "user":
            return run
    return None


# ---- main ------------------------------------------------------------------------------------


def run_suite(jobs: list[Job], datasets: dict[str, Dataset], settings: Settings, out: Path,
              parallel: int | None) -> pd.DataFrame:
    path = out / RESULTS
    results = load_results(path)
    check_same_suite(results, {"protocol": settings.protocol, "outer_folds": settings.outer_folds,
                               "split_seed": settings.split_seed}, path)
    done = {(str(r["task"]), str(r["method"]), int(r["seed"]), int(r["fold"]))
            for r in results.to_dict("records") if r["status"] == "ok"}
    todo = [job for job in jobs if job.key not in done]
    print(f"{len(jobs)} jobs, {len(jobs) - len(todo)} already in {path}, {len(todo)} to run",
          flush=True)
    for row in _rows(todo, datasets, settings, out, parallel):
        results = add_row(results, row)
        save_results(path, results)
        shown = "n/a" if row.get("test") is None else f"{row['test']:.5g}"
        print(f"{row['task']:<22} fold {row['fold']} {row['method']:<9} seed {row['seed']}: "
              f"{row['status']}, {row.get('seconds') or 0:.0f} s, "
              f"test {row.get('metric') or ''} {shown}"
              + (f"  {row['error'][:200]}" if row["error"] else ""), flush=True)
    return results


def _rows(todo: list[Job], datasets: dict[str, Dataset], settings: Settings, out: Path,
          parallel: int | None) -> Any:
    if settings.address is None:
        for job in todo:
            yield run_job(job, datasets[job.task], settings, out)
        return
    import ray

    ray.init(address=settings.address, log_to_driver=False, configure_logging=False)
    try:
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        limit = parallel or max(1, int(cpus // (settings.executors + 1)))
        # A search's own actors hold its CPUs; the task that drives it holds none.
        remote = ray.remote(num_cpus=0)(run_job)
        fitting = ray.remote(num_cpus=1)(run_job)
        pending: list[Any] = []
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < limit:
                job = queue.pop(0)
                runner = fitting if job.kind == "baseline" else remote
                pending.append(runner.remote(job, datasets[job.task], settings, out))
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    try:
        datasets = suite(args.suite)
        policies = _names(args.policies, available(), "policy")
        baselines = _names(args.baselines, sorted(BASELINES), "baseline")
        if args.seeds < 1:
            raise UserError(f"bad --seeds {args.seeds}: it must be at least 1")
        if args.executors < 1:
            raise UserError(f"bad --executors {args.executors}: it must be at least 1")
        if args.protocol not in PROTOCOLS:
            raise UserError(f"unknown --protocol {args.protocol}; choose from "
                            f"{', '.join(PROTOCOLS)}")
        if args.outer_folds < 1:
            raise UserError(f"bad --outer-folds {args.outer_folds}: it must be at least 1")
        arms = tuple(_names(args.program_arms, list(ARMS), "program arm"))
        if not policies and not baselines and not args.floor_arm and not arms:
            raise UserError("nothing to run: give --policies and/or --baselines")
        check_engine_args(extra, floor_arm=args.floor_arm)
        budget = parse_budget(args.budget)
        settings = Settings(
            budget=budget,
            baseline_budget=parse_budget(args.baseline_budget) if args.baseline_budget else budget,
            split_seed=args.split_seed, llm=args.llm, executors=args.executors,
            address=args.address, engine_args=tuple(extra), protocol=args.protocol,
            outer_folds=args.outer_folds,
        )
        if "expert" in arms:
            for dataset in datasets:
                arm_programs("expert", dataset.name, ["any"])  # an error before any search
        jobs = plan_jobs(datasets, policies, baselines, args.seeds, args.outer_folds,
                         floor_arm=args.floor_arm, program_arms=arms)
        results = run_suite(jobs, {d.name: d for d in datasets}, settings, args.out,
                            args.parallel)
    except EngineError as exc:
        return error_exit(exc)
    failed = int((results.status != "ok").sum())
    print(f"results: {args.out / RESULTS} ({len(results)} rows, {failed} failed); report: "
          f"python -m benchmarks.report {args.out / RESULTS} -o {args.out / 'report.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
