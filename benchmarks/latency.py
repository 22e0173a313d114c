"""How long a finished run's answer takes to predict, four ways, on one shipped dataset:

    python -m benchmarks.latency [--dataset concrete-strength] [--run runs/<id>] [--calls 20]
        [--bench-python .venv-bench/bin/python] [--out benchmarks/results/latency-<date>]

- `cli`: `python -m engine.predict RUN rows.csv`, one process a call;
- `api`: `engine.api.load(RUN).predict(rows)` in this process (its sandbox session kept);
- `http`: `POST /predict` to `python -m engine.serve RUN`, one keep-alive connection;
- `autogluon`: `TabularPredictor.predict` on a LightGBM model bagged over 5 folds (the model
  family of the engine's baseline), trained on the same rows, in the bench venv.

With `--answers RUN... [--gap S]`, only the API's warm one-row p50 of each run's answer, one
table row a run, the runs timed in turn in one process (compare answers in the same
conditions; each row also gives the one-row ms the final selection measured,
engine/evaluation/latency.py, and where a served call's time goes: the sandbox session's
request against the engine's own steps around it, each step's median).

For each way: one row (p50 and p99 of `--calls` warm calls) and 10,000 rows (the test rows drawn
with replacement; the median of `--big-calls` warm calls), warm and cold. Cold means a fresh
handle: for the API and AutoGluon a new `load` and its first call (this process has imported
the libraries already); for the CLI its first call (every call is a new process; later ones
find the files in the page cache); for HTTP the service's start (interpreter, imports, its
session) to the first reply. Without `--run` the run is made first: the LLM is the scripted
one that never writes a model, so the answer is the engine's LightGBM baseline (5 fold models
for data under 20,000 rows). Writes `results.json` and `report.md` into `--out`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import engine.predict
import sandbox
from benchmarks.cli import add_shared_flags
from benchmarks.datasets import REGISTRY
from engine.api import fit, load
from engine.evaluation.folds import dev_frame
from engine.records.runs import open_run
from engine.task.prepare import PreparedTask
from fileio import write_atomic

BIG_ROWS = 10_000
NEVER_WRITES = Path(__file__).parent / "scripted_failing.json"
_START_SECONDS = 600.0

# Runs in the bench venv, which has AutoGluon but not necessarily treeml; prints one JSON line.
AUTOGLUON = """
import json, sys, time
import pandas as pd
from autogluon.tabular import TabularPredictor
train, one, big, target, path, calls, big_calls = sys.argv[1:]
calls, big_calls = int(calls), int(big_calls)
one, big = pd.read_csv(one), pd.read_csv(big)
start = time.perf_counter()
TabularPredictor(label=target, path=path, verbosity=0).fit(
    pd.read_csv(train), hyperparameters={"GBM": {}}, num_bag_folds=5, num_stack_levels=0,
    fit_weighted_ensemble=False)
fit_seconds = time.perf_counter() - start
def timed(predictor, rows):
    start = time.perf_counter()
    predictor.predict(rows)
    return time.perf_counter() - start
def cold(rows):
    start = time.perf_counter()
    predictor = TabularPredictor.load(path, verbosity=0)
    predictor.predict(rows)
    return time.perf_counter() - start, predictor
cold_one, predictor = cold(one)
warm_one = [timed(predictor, one) for _ in range(calls)]
warm_big = [timed(predictor, big) for _ in range(big_calls)]
cold_big, _ = cold(big)
import autogluon.core
print("RESULT " + json.dumps({"cold_one": cold_one, "warm_one": warm_one, "cold_big": cold_big,
      "warm_big": warm_big, "fit_seconds": fit_seconds,
      "version": autogluon.core.__version__}))
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="concrete-strength", choices=sorted(REGISTRY),
                        help="shipped dataset (default concrete-strength)")
    parser.add_argument("--run", type=Path, default=None,
                        help="a finished run of that dataset (default: make one)")
    parser.add_argument("--answers", type=Path, nargs="+", default=None, metavar="RUN",
                        help="only the API's warm one-row p50 of each run's answer, in turn")
    parser.add_argument("--calls", type=int, default=20, help="warm one-row calls per way")
    parser.add_argument("--gap", type=float, default=0.0,
                        help="with --answers: seconds of sleep before each timed call (a "
                             "served row that arrives alone; default 0, back to back)")
    parser.add_argument("--cli-calls", type=int, default=5,
                        help="warm one-row calls of the CLI (each is a process)")
    parser.add_argument("--big-calls", type=int, default=3,
                        help=f"warm {BIG_ROWS:,}-row calls per way")
    parser.add_argument("--bench-python", type=Path, default=Path(".venv-bench/bin/python"),
                        help="interpreter with AutoGluon; its column is skipped where missing")
    add_shared_flags(parser, out=f"benchmarks/results/latency-{datetime.now(UTC):%Y-%m-%d}",
                     out_help="folder for results.json and report.md",
                     budget="5m", budget_help="the search budget when the run is made")
    return parser


def make_run(dataset: str, budget: str) -> Path:
    """A run whose answer is the engine's baseline: the only node, the LLM writing none. No
    solution memory: a recalled draft would not be the baseline, and a measurement should
    not add itself to the user's memory."""
    data = REGISTRY[dataset]
    return fit(data.path, data.target, budget=budget, llm=f"scripted:{NEVER_WRITES}",
               max_nodes=1, floor=False, ensemble=False, memory="off").run_dir


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def way(cold_one: float | None, warm_one: list[float], cold_big: float | None,
        warm_big: list[float], **extra: Any) -> dict[str, Any]:
    """One way's record: the raw seconds and the figures the report shows."""
    return {"cold_one": cold_one, "warm_one": warm_one, "cold_big": cold_big,
            "warm_big": warm_big,
            "p50_one": float(np.percentile(warm_one, 50)),
            "p99_one": float(np.percentile(warm_one, 99)),
            "median_big": float(np.median(warm_big)), **extra}


def time_cli(run: Path, one: Path, big: Path, calls: int, big_calls: int) -> dict[str, Any]:
    out = one.parent / "cli-predictions.csv"

    def call(rows: Path) -> float:
        return timed(lambda: subprocess.run(
            [sys.executable, "-m", "engine.predict", str(run), str(rows), "-o", str(out)],
            check=True, capture_output=True))

    cold_one = call(one)
    warm_one = [call(one) for _ in range(calls)]
    cold_big = call(big)
    return way(cold_one, warm_one, cold_big, [call(big) for _ in range(big_calls)])


def time_api(run: Path, one: pd.DataFrame, big: pd.DataFrame, calls: int,
             big_calls: int) -> dict[str, Any]:
    with load(run) as predictor:
        cold_one = timed(lambda: predictor.predict(one))
        warm_one = [timed(lambda: predictor.predict(one)) for _ in range(calls)]
        warm_big = [timed(lambda: predictor.predict(big)) for _ in range(big_calls)]
    with load(run) as predictor:
        cold_big = timed(lambda: predictor.predict(big))
    return way(cold_one, warm_one, cold_big, warm_big)


@contextmanager
def service(run: Path) -> Iterator[http.client.HTTPConnection]:
    """`python -m engine.serve RUN --port 0` until the block ends; a connection to it."""
    proc = subprocess.Popen([sys.executable, "-m", "engine.serve", str(run), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if match := re.search(r"http://([\d.]+):(\d+)", line):
                break
        else:
            raise RuntimeError(f"engine.serve ended with exit code {proc.wait()}")
        conn = http.client.HTTPConnection(match[1], int(match[2]), timeout=_START_SECONDS)
        yield conn
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def post(conn: http.client.HTTPConnection, body: bytes) -> float:
    def call() -> None:
        conn.request("POST", "/predict", body=body)
        response = conn.getresponse()
        reply = response.read()
        if response.status != 200:
            raise RuntimeError(f"/predict answered {response.status}: {reply[:300]!r}")

    return timed(call)


def time_http(run: Path, one: pd.DataFrame, big: pd.DataFrame, calls: int,
              big_calls: int) -> dict[str, Any]:
    one_body, big_body = (rows.to_json(orient="records").encode() for rows in (one, big))
    start = time.perf_counter()
    with service(run) as conn:
        cold_one = time.perf_counter() - start + post(conn, one_body)
        warm_one = [post(conn, one_body) for _ in range(calls)]
        warm_big = [post(conn, big_body) for _ in range(big_calls)]
    start = time.perf_counter()
    with service(run) as conn:
        cold_big = time.perf_counter() - start + post(conn, big_body)
    return way(cold_one, warm_one, cold_big, warm_big)


def time_autogluon(python: Path, task: PreparedTask, one: Path, big: Path, calls: int,
                   big_calls: int, work: Path) -> dict[str, Any]:
    train = work / "dev.csv"
    dev_frame(task).to_csv(train, index=False)
    done = subprocess.run(
        [str(python), "-c", AUTOGLUON, str(train), str(one), str(big), task.target,
         str(work / "autogluon"), str(calls), str(big_calls)],
        capture_output=True, text=True, check=False)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"AutoGluon failed (exit code {done.returncode}): {tail}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    return way(**result)


def rows_to_predict(task: PreparedTask) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One test row, and BIG_ROWS test rows drawn with replacement (seed 0)."""
    rng = np.random.default_rng(0)
    big = task.test_X.iloc[rng.integers(0, len(task.test_X), BIG_ROWS)]
    return task.test_X.head(1), big.reset_index(drop=True)


# How each saved form predicts (engine/deploy/saved_model.py).
FORMS = {"fitted model": "kept as fitted models (a call reads no training rows and fits nothing)",
         "replay": "kept as a replay's fits (every call reruns the solution over its training "
                   "rows with the fits restored)"}


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:,.0f} ms"


def report(results: dict[str, Any], command: str) -> str:
    """report.md: the table, what was measured, on what, and the command."""
    ways = results["ways"]
    lines = [
        f"# Prediction latency, {results['dataset']} ({results['date']})", "",
        f"The answer of run `{results['run']}`: {results['answer']}. One row: a test row; "
        f"{BIG_ROWS:,} rows: test rows drawn with replacement. Warm one-row figures over "
        f"{results['calls']} calls ({results['cli_calls']} for the CLI; with so few, p99 is "
        f"about the slowest call); warm {BIG_ROWS:,} rows: the median of {results['big_calls']} "
        "calls. Cold: a fresh handle (see `benchmarks/latency.py`'s docstring; for HTTP the "
        "service's start to its first reply).", "",
        f"Machine: {results['machine']}; 1-minute load average {results['load'][0]:.1f} at "
        f"the start, {results['load'][1]:.1f} at the end (the benchmark's own run and its "
        "processes included; anything above that is other work sharing the cores, and makes "
        "every figure an upper bound).", "",
        "| way | 1 row, cold | 1 row, warm p50 | 1 row, warm p99 | "
        f"{BIG_ROWS:,} rows, cold | {BIG_ROWS:,} rows, warm |",
        "|---|---|---|---|---|---|",
    ]
    for name, record in ways.items():
        if "skipped" in record:
            lines.append(f"| {name} | {record['skipped']} | | | | |")
            continue
        lines.append(f"| {name} | {_ms(record['cold_one'])} | {_ms(record['p50_one'])} | "
                     f"{_ms(record['p99_one'])} | {_ms(record['cold_big'])} | "
                     f"{_ms(record['median_big'])} |")
    lines += ["", "Made by:", "", "```bash", command, "```", ""]
    return "\n".join(lines)


# The steps of a served call (engine.predict.Answer.predict) timed apart, by the name each has
# in the --answers table: the sandbox session's request, and the engine's own work around it.
SERVED_STEPS = {
    "request": (sandbox.Session, "request"),
    "reply read": (engine.predict, "read_stacked"),
    "rows checked": (engine.predict, "feature_rows"),
    "rows to CSV": (engine.predict, "csv_bytes"),
    "combined": (engine.predict, "combine_predictions"),
    "answer to CSV": (engine.predict, "frame_csv"),
}


@contextmanager
def timed_steps() -> Iterator[dict[str, list[float]]]:
    """Every SERVED_STEPS function wrapped by a timer while inside: each step's seconds, a
    list per step, one entry a call; the functions restored after."""
    seconds: dict[str, list[float]] = {name: [] for name in SERVED_STEPS}
    originals = {name: getattr(owner, attr) for name, (owner, attr) in SERVED_STEPS.items()}

    def timer(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[name].append(time.perf_counter() - start)
        return call

    try:
        for name, (owner, attr) in SERVED_STEPS.items():
            setattr(owner, attr, timer(name, originals[name]))
        yield seconds
    finally:
        for name, (owner, attr) in SERVED_STEPS.items():
            setattr(owner, attr, originals[name])


def answer_row(run: Path, calls: int, gap: float = 0.0) -> str:
    """A table row: the run's data set and answer (its kind, saved models, their size), the
    one-row ms its final selection measured, the p50 and fastest of `calls` warm one-row
    `load().predict` calls (after a warm-up of 3; `gap` seconds of sleep before each), and of
    that p50 the session's request and the engine's own steps (medians, SERVED_STEPS)."""
    stored = open_run(run)
    answer = stored.journal.final()
    selection = stored.selection
    latency = selection.latency if selection else None
    measured = latency.answer_ms if latency else None
    model = (selection.model if selection else None) or {}
    saved = (f"{model['models']} models, {model['bytes'] / 2**20:.1f} MiB" if model.get("saved")
             else "not saved")
    one = stored.task().test_X.head(1)
    warm = []
    with load(run) as predictor:
        for _ in range(3):
            predictor.predict(one)
        with timed_steps() as steps:
            for _ in range(calls):
                time.sleep(gap)
                warm.append(timed(lambda: predictor.predict(one)))
    kind = answer.operator.value if answer else "none"
    step_ms = {name: 1000 * float(np.median(times)) if times else float("nan")
               for name, times in steps.items()}
    engine_ms = sum(ms for name, ms in step_ms.items() if name != "request")
    return (f"| {Path(str(stored.config.get('data'))).stem} | {run.name} | {kind} | {saved} | "
            f"{'' if measured is None else f'{measured:.1f}'} | "
            f"{1000 * float(np.median(warm)):.1f} | {1000 * min(warm):.1f} | "
            f"{step_ms['request']:.1f} | {engine_ms:.1f} | "
            + ", ".join(f"{name} {ms:.1f}" for name, ms in step_ms.items() if name != "request")
            + " |")


def answers(runs: list[Path], calls: int, gap: float = 0.0) -> str:
    """The `--answers` table, each run timed in turn."""
    lines = ["| data | run | answer | saved model | measured at selection, ms | "
             "load().predict p50, ms | fastest, ms | of it the request, ms | "
             "the engine's steps, ms | each step, ms |", "|" + "---|" * 10]
    for run in runs:
        lines.append(answer_row(run, calls, gap))
        print(lines[-1], flush=True)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.answers:
        answers(args.answers, args.calls, args.gap)
        return 0
    load_at_start = os.getloadavg()[0]
    run = args.run or make_run(args.dataset, args.budget)
    stored = open_run(run)
    task = stored.task()
    model = json.loads((run / "best" / "model" / "model.json").read_text())
    if not model.get("saved"):
        raise SystemExit(f"error: {run} kept no model of its answer; these timings need one")
    answer = stored.journal.final()
    assert answer is not None  # a saved model is the answer's
    one, big = rows_to_predict(task)
    ways: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="latency-") as tmp:
        work = Path(tmp)
        one_csv, big_csv = work / "one.csv", work / "big.csv"
        one.to_csv(one_csv, index=False)
        big.to_csv(big_csv, index=False)
        for name, measure in (
            ("cli (engine.predict)", lambda: time_cli(run, one_csv, big_csv, args.cli_calls,
                                                      args.big_calls)),
            ("api (Predictor.predict)", lambda: time_api(run, one, big, args.calls,
                                                         args.big_calls)),
            ("http (engine.serve)", lambda: time_http(run, one, big, args.calls,
                                                      args.big_calls)),
        ):
            print(f"timing {name} ...", flush=True)
            ways[name] = measure()
        name = "autogluon (TabularPredictor.predict)"
        if args.bench_python.is_file():
            print(f"timing {name} ...", flush=True)
            ways[name] = time_autogluon(args.bench_python, task, one_csv, big_csv, args.calls,
                                        args.big_calls, work)
        else:
            ways[name] = {"skipped": f"skipped: no bench venv at {args.bench_python}"}
    results = {
        "dataset": args.dataset, "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "run": run.name,
        "answer": f"node {answer.node_id} ({answer.operator.value}), {model['models']} saved "
                  f"model(s) fitted on {model['training']}, {model['bytes'] / 2**20:.1f} MiB, "
                  + FORMS.get(model.get("form", "replay"), model.get("form", "")),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                   f"{platform.python_version()}",
        "load": [load_at_start, os.getloadavg()[0]],
        "calls": args.calls, "cli_calls": args.cli_calls, "big_calls": args.big_calls,
        "ways": ways,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "results.json", json.dumps(results, indent=2) + "\n")
    command = "python -m benchmarks.latency " + " ".join(argv if argv is not None
                                                         else sys.argv[1:])
    write_atomic(args.out / "report.md", report(results, command))
    print(report(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
