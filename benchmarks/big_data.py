"""Data that outgrows a laptop (issue 75): a generated table of `--rows` rows, searched for
`--budget` by `engine.run`, against peers fitted on the same rows, on this machine, one at a time:

    python -m benchmarks.big_data --rows 1000000 [--budget 5m] [--peers lgbm,autogluon]
        [--executors N] [--metric roc_auc] [--seed 0] [--llm llama] [--no-search]
        [--out benchmarks/results/big-data-DATE]

The table is generated, never shipped (`generate`): a binary label from 16 numbers (some
interacting, one with missing values), a 5-level text column and a 500-level integer column,
80 % of its rows in train.csv and 20 % in test.csv, written once under OUT/data/. The search is
`python -m engine.run` in its own process; its wall time and the peak memory of its whole
process tree (the driver, Ray and every sandboxed candidate: the sum of their resident sets,
sampled every half second) are measured from outside. A peer (`benchmarks.baselines`:
`lgbm` is LightGBM's defaults on every learning row, `autogluon` needs the bench venv) is
fitted on the same rows and scored on the same test rows. Writes `results.json` (one row per
method) and `report.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.baselines import BASELINES
from benchmarks.cli import add_shared_flags
from benchmarks.table import measure_run
from common.errors import UserError
from engine.config import parse_budget
from engine.records.runs import open_run
from engine.task.prepare import TaskSpec, prepare_task
from fileio import write_atomic
from search.node import Operator, Status

TARGET = "label"
TEST_SHARE = 0.2
LEVELS = ("north", "south", "east", "west", "centre")
REGIONS = 500
# the floor's trials the issue counts: the baseline, the portfolio and Optuna's trials
FLOOR_TRIALS = (Operator.BASELINE, Operator.PORTFOLIO, Operator.TUNE)


def generate(rows: int, seed: int = 0) -> pd.DataFrame:
    """`rows` rows of the benchmark's table: x0..x15, `segment` (text), `region` (integer id)
    and `label` (0/1, about 40 % ones), the same for the same `rows` and `seed`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 16)).astype(np.float32)
    x[:, 7] = x[:, 6] * 0.8 + x[:, 7] * 0.6  # correlated columns
    segment = rng.integers(0, len(LEVELS), rows)
    region = rng.integers(0, REGIONS, rows)
    region_effect = np.random.default_rng(seed + 1).normal(0.0, 0.8, REGIONS)
    logit = (1.5 * np.sin(x[:, 0]) + x[:, 1] * x[:, 2] + 0.8 * x[:, 3] - 0.5 * x[:, 4] ** 2
             + np.abs(x[:, 5]) + 0.6 * (x[:, 6] > 0.5) * x[:, 8]
             + np.array([0.0, 0.4, -0.4, 0.8, -0.8])[segment] + region_effect[region] - 0.6)
    label = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int8)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(16)])
    frame.loc[rng.random(rows) < 0.05, "x9"] = np.nan
    frame["segment"] = np.asarray(LEVELS)[segment]
    frame["region"] = region
    frame[TARGET] = label
    return frame


def write_table(rows: int, seed: int, folder: Path) -> tuple[Path, Path]:
    """train.csv and test.csv of `generate(rows, seed)` under `folder`, written once."""
    train, test = folder / "train.csv", folder / "test.csv"
    if train.is_file() and test.is_file():
        return train, test
    folder.mkdir(parents=True, exist_ok=True)
    frame = generate(rows, seed)
    cut = round(rows * (1 - TEST_SHARE))
    for path, part in ((train, frame.iloc[:cut]), (test, frame.iloc[cut:])):
        write_atomic(path, part.to_csv(index=False, float_format="%.6g"))
    return train, test


def tree_rss(root: int) -> int:
    """The resident bytes of process `root` and every process below it (read from /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        parents[int(entry)] = int(fields[1])
        rss[int(entry)] = int(fields[21]) * page
    below, total, frontier = {root}, 0, [root]
    while frontier:
        pid = frontier.pop()
        total += rss.get(pid, 0)
        children = [p for p, parent in parents.items() if parent == pid and p not in below]
        below.update(children)
        frontier.extend(children)
    return total


def run_engine(argv: list[str]) -> tuple[int, float, int]:
    """`python -m engine.run ARGV` in its own process: its exit code, wall seconds and the
    peak resident bytes of its process tree."""
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "engine.run", *argv])
    peak, done = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.5):
            peak = max(peak, tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    done.set()
    sampler.join()
    return code, time.time() - started, peak


def search_row(data: Path, test: Path, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    runs = out / "runs" / f"rows-{args.rows}"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    argv = ["--data", str(data), "--test", str(test), "--target", TARGET, "--metric",
            args.metric, "--budget", args.budget,
            *(["--executors", str(args.executors)] if args.executors else []),
            "--seed", str(args.seed), "--llm", args.llm, "--out", str(runs), "--memory", "off",
            "--quiet"]
    code, wall, peak = run_engine(argv)
    row: dict[str, Any] = {"method": "treeml", "exit": code, "wall_seconds": wall,
                           "peak_rss_gib": peak / 2**30}
    made = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
    if made:
        row.update(measure_run(made[-1]))
        journal = open_run(made[-1]).journal
        row["floor_ok"] = sum(n.is_ok for op in FLOOR_TRIALS for n in journal.nodes_of(op))
        row["timed_out"] = sum(n.status is Status.TIMEOUT for n in journal)
    return row


def peer_row(name: str, data: Path, test: Path, args: argparse.Namespace,
             out: Path) -> dict[str, Any]:
    task = prepare_task(TaskSpec(data, TARGET, test, args.metric), seed=args.seed)
    folder = out / "peers" / f"rows-{args.rows}" / name
    folder.mkdir(parents=True, exist_ok=True)
    started = time.time()
    result = BASELINES[name](task, parse_budget(args.budget), args.seed, folder)
    return {"method": name, "exit": 0, "wall_seconds": time.time() - started,
            "test": result.test, "valid": result.valid, "nodes": result.fits,
            "metric": task.metric.name}


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    executors = args.executors or "engine.run's default"
    lines = [f"# {args.rows:,} rows, {args.budget}, executors: {executors}, --llm {args.llm} "
             f"({os.cpu_count()} cores)", "",
             f"`python -m benchmarks.big_data {' '.join(sys.argv[1:])}`", "",
             "| method | test | wall s | peak GiB | nodes | ok nodes | ok floor trials "
             "| timed out |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        test = row.get("test")
        peak = row.get("peak_rss_gib")
        lines.append(f"| {row['method']} | {'-' if test is None else f'{test:.5f}'} "
                     f"| {row['wall_seconds']:.0f} | {'-' if peak is None else f'{peak:.2f}'} "
                     f"| {row.get('nodes', '-')} | {row.get('ok_nodes', '-')} "
                     f"| {row.get('floor_ok', '-')} | {row.get('timed_out', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the generated table")
    parser.add_argument("--peers", default="lgbm", help="comma-separated: "
                        + ", ".join(BASELINES) + " ('' for none)")
    parser.add_argument("--executors", type=int, default=None,
                        help="executors of the search (default: engine.run's, one per core "
                             "the LLM leaves)")
    parser.add_argument("--metric", default="roc_auc")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-search", action="store_true", help="the peers alone")
    add_shared_flags(parser, out="benchmarks/results/big-data", out_help="results folder",
                     budget="5m", llm="llama")
    args = parser.parse_args(argv)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in BASELINES]
    if unknown or args.rows < 100:
        raise SystemExit(f"bad flags: unknown peers {unknown}" if unknown
                         else "bad --rows: at least 100")
    out: Path = args.out
    data, test = write_table(args.rows, args.seed, out / "data" / f"rows-{args.rows}")
    rows = [] if args.no_search else [search_row(data, test, args, out)]
    for name in peers:
        try:
            rows.append(peer_row(name, data, test, args, out))
        except (UserError, ImportError) as exc:
            rows.append({"method": name, "exit": 1, "wall_seconds": 0.0, "error": str(exc)})
    write_atomic(out / "results.json", json.dumps(rows, indent=2, default=str) + "\n")
    write_atomic(out / "report.md", report(rows, args))
    print(report(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
