"""How much of the cores' time the floor's trials get (issue 77): the engine's floor against a
bare in-process loop running the same trials on the same rows, one core each:

    python -m benchmarks.throughput [--suite NAMES] [--rows 20000] [--budget 2m]
        [--checkout DIR] [--out benchmarks/results/throughput-DATE]

For each data set of `--suite` (default: concrete-strength, wine-quality-white and
california-housing: 1,030, 4,898 and 20,000 rows; at most `--rows` of each, sampled with seed
0, since the engine scores up to 20,000 rows on 5 folds), `python -m engine.run --llm none`
searches for `--budget` on every core, in its own process, alone. Its floor trials (baseline,
portfolio entries, Optuna trials that ran) are then **replayed** on every core at once, one
process a core on one thread (the cores as busy as the search's executors kept them): each
trial's own `make_model()` (its node's code, loaded as a saved model loads it) fitted on the
learn rows of 5 folds of the same rows and predicting the held-out rows, nothing else. The bare
loop's seconds for the same trials, over the cores' seconds the search had (cores x its wall
time), is the share of the cores' time the floor's trials got: its trials per core-minute
against the bare loop's. The rest is the engine's own cost: starting and confining each run,
reading its inputs, predicting the test rows, scoring, storing, start-up and choosing the
answer. The search share leaves the last two out: the same seconds over the cores' seconds from
the first node's start to the last node's end.

`--checkout DIR` runs another checkout's engine (before and after a change, on the same rows);
the replay always uses this checkout. Writes `results.json` and `report.md` to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.big_data import FLOOR_TRIALS
from benchmarks.cli import add_shared_flags
from benchmarks.datasets import Dataset, suite
from common.errors import UserError, error_exit
from fileio import write_atomic
from sandbox import THREAD_ENV

FOLDS = 5
SUITE = "concrete-strength,wine-quality-white,california-housing"
# what the sandbox gives every candidate: one thread
ONE_THREAD = dict.fromkeys(THREAD_ENV, "1")


def sample(dataset: Dataset, rows: int, folder: Path) -> Path:
    """The data set, at most `rows` rows of it (seed 0), as a CSV under `folder`."""
    import pandas as pd

    frame = pd.read_csv(dataset.path)
    if len(frame) > rows:
        frame = frame.sample(rows, random_state=0).reset_index(drop=True)
    path = folder / f"{dataset.name}-{len(frame)}.csv"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
    return path


def search(dataset: Dataset, data: Path, budget: str, checkout: Path, runs: Path
           ) -> tuple[Path, float]:
    """`engine.run --llm none` on `data` from `checkout`: its run folder and wall seconds."""
    runs.mkdir(parents=True, exist_ok=True)
    before = set(runs.iterdir())
    argv = [sys.executable, "-m", "engine.run", "--data", str(data.resolve()), "--target",
            dataset.target, "--metric", dataset.amlb_metric, "--budget", budget, "--llm",
            "none", "--memory", "off", "--out", str(runs.resolve()), "--quiet"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=checkout, capture_output=True, text=True)
    wall = time.monotonic() - started
    made = sorted(set(runs.iterdir()) - before)
    if done.returncode != 0 or not made:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"engine.run failed on {dataset.name} (exit {done.returncode}): "
                        f"{tail[0]}")
    return made[-1], wall


def replay(run: Path, part: int = 0, parts: int = 1) -> dict[str, Any]:
    """The floor trials of `run` (every `parts`-th from the `part`-th, in the journal's order)
    fitted in this process on 5 folds of its rows (learn, then predict the held-out rows):
    their count and seconds."""
    import numpy as np

    from engine.evaluation.folds import dev_frame, fold_splitter
    from engine.records.runs import open_run
    from engine.task.prepare import load_task
    from operators.harness import MODEL_MODULE

    journal = open_run(run).journal
    task = load_task(run / "task")
    task_type = task.task_type
    dev = dev_frame(task)
    X, y = dev.drop(columns=[task.target]), dev[task.target]
    folds = list(fold_splitter(task_type, FOLDS, 0).split(np.zeros(len(y)), y))
    seconds = []
    trials = [n for n in journal if n.operator in FLOOR_TRIALS and n.is_ok]
    for node in trials[part::parts]:
        namespace: dict[str, Any] = {"__name__": MODEL_MODULE}
        exec(compile(node.code, "solution.py", "exec"), namespace)  # the engine's own code
        started = time.perf_counter()
        for learn, held in folds:
            model = namespace["make_model"]()
            model.fit(X.iloc[learn].reset_index(drop=True), y.iloc[learn].reset_index(drop=True))
            rows = X.iloc[held].reset_index(drop=True)
            model.predict(rows) if task_type == "regression" else model.predict_proba(rows)
        seconds.append(time.perf_counter() - started)
    return {"rows": len(dev), "trials": len(seconds), "bare_seconds": sum(seconds),
            "trial_seconds": seconds}


def replayed(run: Path, cores: int) -> dict[str, Any]:
    """`replay` on every core at once, each process a share of the trials on one thread, as
    the search's executors shared the cores."""
    env = {**os.environ, **ONE_THREAD}
    parts = [subprocess.Popen([sys.executable, "-m", "benchmarks.throughput", "--replay",
                               str(run), "--part", f"{part}/{cores}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for part in range(cores)]
    results = []
    for process in parts:
        out, err = process.communicate()
        if process.returncode != 0:
            raise UserError(f"the replay of {run} failed: {err.strip()[-300:]}")
        results.append(json.loads(out))
    seconds = [s for result in results for s in result["trial_seconds"]]
    return {"rows": results[0]["rows"], "trials": len(seconds), "bare_seconds": sum(seconds),
            "median_trial_seconds": statistics.median(seconds) if seconds else None}


def search_span(run: Path) -> float:
    """Seconds from the first node's start to the last one's end: the search without the
    run's start-up and its choosing and saving of the answer."""
    from engine.records.runs import open_run

    nodes = list(open_run(run).journal)
    return max(n.finished_at for n in nodes) - min(n.created_at for n in nodes)


def measure(dataset: Dataset, args: argparse.Namespace) -> dict[str, Any]:
    data = sample(dataset, args.rows, args.out / "data")
    run, wall = search(dataset, data, args.budget, args.checkout, args.out / "runs")
    cores = os.cpu_count() or 1
    return row(dataset.name, run, wall, cores, replayed(run, cores))


def row(name: str, run: Path, wall: float, cores: int, replayed: dict[str, Any]
        ) -> dict[str, Any]:
    """The results of one search and its replay."""
    core_minutes = cores * wall / 60
    bare_minutes = replayed["bare_seconds"] / 60
    trials = replayed["trials"]
    span = search_span(run)
    return {"dataset": name, **replayed, "cores": cores, "wall_seconds": wall,
            "search_seconds": span, "run": str(run),
            "engine_trials_per_core_minute": trials / core_minutes,
            "bare_trials_per_core_minute": trials / bare_minutes if bare_minutes else None,
            "share": bare_minutes / core_minutes,
            "search_share": replayed["bare_seconds"] / (cores * span)}


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"# Floor trials per core-minute, the engine against a bare loop ({args.budget}, "
             f"{os.cpu_count()} cores, checkout {args.checkout})", "",
             f"`python -m benchmarks.throughput {' '.join(sys.argv[1:])}`", "",
             "| data set | rows | trials | engine trials / core-min | bare trials / core-min "
             "| share | search share | median bare trial s | wall s | search s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bare = r["bare_trials_per_core_minute"]
        median = r["median_trial_seconds"]
        lines.append(
            f"| {r['dataset']} | {r['rows']} | {r['trials']} | "
            f"{r['engine_trials_per_core_minute']:.1f} | "
            f"{'-' if bare is None else f'{bare:.1f}'} | {100 * r['share']:.0f} % | "
            f"{100 * r['search_share']:.0f} % | {'-' if median is None else f'{median:.2f}'} | "
            f"{r['wall_seconds']:.0f} | {r['search_seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.throughput",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows of each data set at most")
    parser.add_argument("--checkout", type=Path, default=Path.cwd(),
                        help="the checkout whose engine searches (default: this one)")
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)  # one run's replay
    parser.add_argument("--part", default="0/1", help=argparse.SUPPRESS)  # its share: i/k
    add_shared_flags(parser, out="benchmarks/results/throughput", out_help="results folder",
                     suite=SUITE, budget="2m")
    args = parser.parse_args(argv)
    if args.replay is not None:
        part, parts = (int(x) for x in args.part.split("/"))
        print(json.dumps(replay(args.replay, part, parts)))
        return 0
    try:
        if args.rows < 100:
            raise UserError(f"--rows {args.rows}: give at least 100")
        if not (args.checkout / "engine" / "run.py").is_file():
            raise UserError(f"--checkout {args.checkout}: no engine/run.py there; give a "
                            "checkout of this project")
        rows = []
        for dataset in suite(args.suite):
            rows.append(measure(dataset, args))
            print(f"throughput: {dataset.name}: {100 * rows[-1]['share']:.0f} %",
                  file=sys.stderr)
            write_atomic(args.out / "results.json", json.dumps(rows, indent=2) + "\n")
        text = report(rows, args)
        write_atomic(args.out / "report.md", text)
    except UserError as exc:
        return error_exit(exc)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
