"""Does the solution memory pay off? The paired table of two benchmark arms (issue 21).

    python -m benchmarks.memory runs/bench-mem/off runs/bench-mem/on -o report.md

Each arm is a `benchmarks.run` output folder (results.parquet and its runs) of the same tasks
and seeds, one made with `--memory off`, one with a memory (leave-one-task-out by
construction: a task never retrieves its own cases, engine/memory.py). Per task and arm:
- drafts (generated and recall roots; a recall of 010e490's runs is a case node's child) that
  ran ok without a debug step, of those that ran;
  a retrieved case run as stored (engine-run, search/floor.py) is no draft and no
  LLM-written node, and is counted on its own;
- seconds until the first LLM-written node (draft, recall, improve, debug) beat the baseline
  root's valid score, from the run's start;
- the answer's test score, and the 95% paired bootstrap interval of its gain with the memory
  (the two answers' test predictions scored on the same resampled test rows; positive is
  better): where it spans zero, that task's one seed cannot separate the arms.
The totals give each share with its 95% Wilson interval and the tasks where the memory arm
was faster or better, with an exact sign test: with one seed and six tasks, say so plainly
where it cannot separate the arms. With two seeds or more in both arms, a second table sets
each task's memory gain (of the seeds' mean test scores) against how far each arm's own seeds
lie apart, and pairs each arm's first and last seed like the two arms (an A/A pair): how often
two runs of the same arm differ beyond the test-row interval says what that interval is worth
as evidence about the memory. The seeds of a task share its test rows, so a gain beyond the
spread can still rest on one of them: the table also gives the gain without the test row that
moves it most, and counts a gain beyond the spread only when it stays beyond without that row.

Several pairs of arms (`OFF ON OFF ON ...`) give one table: runs made with another
`--split-seed` (another test split of the same tasks) are paired within their own split.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.gain import answer as run_answer
from benchmarks.gain import answer_gain_interval
from benchmarks.stats import share, sign_test
from benchmarks.table import load_results
from common.metric import METRICS
from engine.evaluation.select import resampled_scores
from engine.records.runs import open_run
from operators.harness import model_part
from operators.retrieval import as_stored, replaced_model
from search.node import Operator

LLM_WRITTEN = (Operator.DRAFT, Operator.RECALL, Operator.IMPROVE, Operator.DEBUG)


def measure(run_dir: Path) -> dict[str, Any]:
    """One run's draft success, its cases run as stored, and time to the first LLM-written
    node that beat the baseline root."""
    run = open_run(run_dir)
    nodes = list(run.journal)
    start = min((n.created_at for n in nodes if n.created_at), default=0.0)
    # The LLM's first attempts: drafts and recalls, roots, or (runs made at 010e490, whose
    # recall waited for its case node) a child of the case node.
    drafts = [n for n in nodes if n.operator.traits.draft
              and n.code and (n.exec_seconds > 0 or n.is_ok)]
    recalls = [n for n in drafts if n.operator is Operator.RECALL]
    stored = [n for n in nodes if as_stored(n)]
    cases = {n.hint: model_part(n.code) for n in stored if n.operator is Operator.CASE}
    replaced = [n for n in recalls
                if n.hint in cases and replaced_model(cases[n.hint], model_part(n.code))]
    beaten = [n.finished_at - start for n in nodes
              if n.operator in LLM_WRITTEN and not as_stored(n) and run.journal.beats_baseline(n)]
    # An older run's recall whose reply was set aside for the case as stored counts as a
    # draft whose reply did not run: the LLM wrote none of what ran.
    return {"drafts_ok": sum(n.is_ok and not as_stored(n) for n in drafts),
            "drafts": len(drafts),
            "recalls_ok": sum(n.is_ok and not as_stored(n) for n in recalls),
            "recalls": len(recalls),
            "replaced": len(replaced), "replaced_ok": sum(n.is_ok for n in replaced),
            "stored": len(stored), "stored_ok": sum(n.is_ok for n in stored),
            "stored_beat": sum(run.journal.beats_baseline(n) for n in stored),
            "first_beat": min(beaten) if beaten else None}


def arm(folder: Path) -> pd.DataFrame:
    results = load_results(folder / "results.parquet")
    results = results[results.kind == "policy"]
    rows = []
    for row in results.to_dict("records"):
        run_dir = Path(str(row["run_dir"]))
        rows.append({"task": row["task"], "split_seed": int(row["split_seed"]),
                     "seed": row["seed"], "metric": row["metric"], "test": row["test"],
                     "run_dir": str(run_dir), **measure(run_dir)})
    return pd.DataFrame(rows)


def left_out_scores(run_dir: Path) -> tuple[pd.Series, np.ndarray] | None:
    """A run's test labels and its answer's raw test score with each test row left out in
    turn (score i lacks row i); None when the answer's predictions are missing."""
    answer = run_answer(run_dir)
    if answer is None:
        return None
    task, truth, submission = answer
    rows = len(truth)
    return truth, resampled_scores(task, submission, np.ones((rows, rows)) - np.eye(rows), truth)


def gain_without_one_row(metric: str, gain: float, off: list[np.ndarray],
                         on: list[np.ndarray]) -> float:
    """The memory's gain of the seeds' mean test scores (`gain`, as `_gain` gives it) with one
    test row left out: the row whose absence moves it most against its sign. `off` and `on`
    hold each seed's `left_out_scores`, all on the same rows."""
    spec = METRICS[metric]
    gains = [spec.normalise(float(b)) - spec.normalise(float(a))
             for a, b in zip(np.mean(off, axis=0), np.mean(on, axis=0), strict=True)]
    return min(gains) if gain >= 0 else max(gains)


def _or_never(value: Any) -> float:
    return float("inf") if value is None or pd.isna(value) else float(value)


def _seconds(value: Any) -> str:
    seconds = _or_never(value)
    return "never" if seconds == float("inf") else f"{seconds:.0f} s"


def _interval(first: Any, second: Any) -> tuple[float, float] | None:
    if pd.isna(first) or pd.isna(second):
        return None
    return answer_gain_interval(Path(str(first)), Path(str(second)))


def _shown(interval: tuple[float, float] | None) -> str:
    return "n/a" if interval is None else f"{interval[0]:+.4g} to {interval[1]:+.4g}"


def _gain(metric: str, before: float, after: float) -> float:
    """after's test gain over before's: positive is better."""
    spec = METRICS[metric]
    return spec.normalise(after) - spec.normalise(before)


def _stored(row: Mapping[Hashable, Any]) -> str:
    return (f"; as stored {row['stored_ok_on']}/{row['stored_on']}" if row.get("stored_on")
            else "")


def _with_split(text: object, split_seed: int) -> str:
    """A task or seed cell, with the split seed where it is not the suite's default."""
    return f"{text}" if split_seed == 0 else f"{text}, split {split_seed}"


def table(off: pd.DataFrame, on: pd.DataFrame) -> str:
    paired = off.merge(on, on=["task", "split_seed", "seed", "metric"], suffixes=("_off", "_on"))
    lines = ["| task | seed | metric | drafts ok, off | drafts ok, on (recall) | first beat, off | "
             "first beat, on | test, off | test, on | test gain with memory, 95% |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    faster = slower = better = worse = surely_better = surely_worse = 0
    for r in paired.to_dict("records"):
        interval = _interval(r["run_dir_off"], r["run_dir_on"])
        lines.append(
            f"| {r['task']} | {_with_split(r['seed'], r['split_seed'])} | {r['metric']} | "
            f"{r['drafts_ok_off']}/{r['drafts_off']} | "
            f"{r['drafts_ok_on']}/{r['drafts_on']} ({r['recalls_ok_on']}/{r['recalls_on']}"
            f"{_stored(r)}) | "
            f"{_seconds(r['first_beat_off'])} | {_seconds(r['first_beat_on'])} | "
            f"{r['test_off']:.4g} | {r['test_on']:.4g} | {_shown(interval)} |")
        a, b = _or_never(r["first_beat_off"]), _or_never(r["first_beat_on"])
        faster += b < a
        slower += b > a
        gain = _gain(str(r["metric"]), float(r["test_off"]), float(r["test_on"]))
        better += gain > 1e-12
        worse += gain < -1e-12
        surely_better += interval is not None and interval[0] > 0
        surely_worse += interval is not None and interval[1] < 0
    off_share = share(int(paired.drafts_ok_off.sum()), int(paired.drafts_off.sum()))
    on_share = share(int(paired.drafts_ok_on.sum()), int(paired.drafts_on.sum()))
    recall_share = share(int(paired.recalls_ok_on.sum()), int(paired.recalls_on.sum()))
    lines += [
        "",
        f"- drafts that ran without a debug step: off {off_share}; on {on_share} (recall "
        f"drafts alone: {recall_share})",
        f"- recall replies that replaced the case's model (counted above as they ran): "
        f"{int(paired.replaced_on.sum())} of {int(paired.recalls_on.sum())}; ran ok "
        f"{int(paired.replaced_ok_on.sum())}",
        f"- cases run as stored (engine-run, not drafts): {int(paired.stored_on.sum())}; ran "
        f"ok {int(paired.stored_ok_on.sum())}, beat the baseline root "
        f"{int(paired.stored_beat_on.sum())}",
        f"- first LLM-written node beating the baseline root: sooner with memory on {faster} "
        f"of {len(paired)} tasks, later on {slower} (sign test p = "
        f"{sign_test(faster, slower):.2f})",
        f"- answer's test score: better with memory on {better} of {len(paired)} tasks, worse "
        f"on {worse} (sign test p = {sign_test(better, worse):.2f}); beyond its 95% interval: "
        f"better on {surely_better}, worse on {surely_worse}",
    ]
    return "\n".join(lines) + "\n" + run_to_run(off, on)


def run_to_run(off: pd.DataFrame, on: pd.DataFrame) -> str:
    """With two seeds or more in both arms, each task's memory gain of the seeds' mean test
    scores against how far each arm's own seeds lie apart, also without the test row that
    moves the gain most; and each arm's first seed against its last (an A/A pair), with the
    same paired test-row interval as the table's. "" with fewer seeds."""
    lines = ["", "| task | test off, by seed | test on, by seed | gain of the means | "
             "without its most moving test row | spread off | spread on | "
             "off, last seed against first, 95% | on, last seed against first, 95% |",
             "|---|---|---|---|---|---|---|---|---|"]
    tasks = better = worse = steady_better = steady_worse = pairs = apart = 0
    groups = sorted(set(zip(off.task, off.split_seed, strict=True))
                    & set(zip(on.task, on.split_seed, strict=True)))
    for task, split_seed in groups:
        arms = [frame[(frame.task == task) & (frame.split_seed == split_seed)].sort_values("seed")
                for frame in (off, on)]
        if min(len(a) for a in arms) < 2:
            continue
        metric = str(arms[0].metric.iloc[0])
        tests = [a.test.astype(float) for a in arms]
        gain = _gain(metric, tests[0].mean(), tests[1].mean())
        steady = _without_one_row(metric, gain, arms)
        spread = [float(t.max() - t.min()) for t in tests]
        same = [_interval(a.run_dir.iloc[0], a.run_dir.iloc[-1]) for a in arms]
        lines.append(
            f"| {_with_split(task, split_seed)} | {' / '.join(f'{t:.4g}' for t in tests[0])} | "
            f"{' / '.join(f'{t:.4g}' for t in tests[1])} | {gain:+.4g} | "
            f"{'n/a' if steady is None else f'{steady:+.4g}'} | {spread[0]:.4g} | "
            f"{spread[1]:.4g} | {_shown(same[0])} | {_shown(same[1])} |")
        tasks += 1
        better += gain > max(spread)
        worse += gain < -max(spread)
        steady_better += gain > max(spread) and steady is not None and steady > max(spread)
        steady_worse += gain < -max(spread) and steady is not None and steady < -max(spread)
        pairs += sum(i is not None for i in same)
        apart += sum(i is not None and (i[0] > 0 or i[1] < 0) for i in same)
    if not tasks:
        return ""
    return "\n".join([
        *lines, "",
        f"- the memory's gain of the mean test score beyond both arms' own seed-to-seed "
        f"spread: better on {better} of {tasks} tasks, worse on {worse}; still beyond it "
        f"without the test row that moves the gain most: better on {steady_better}, worse on "
        f"{steady_worse} (the seeds share their test rows, so the spread does not measure how "
        f"much one row decides)",
        f"- the same arm run twice (its last seed against its first): answers apart beyond "
        f"the 95% test-row interval on {apart} of {pairs} pairs (that interval holds both "
        f"answers fixed; it does not measure how far another run would land)",
    ]) + "\n"


def _without_one_row(metric: str, gain: float, arms: list[pd.DataFrame]) -> float | None:
    """`gain_without_one_row` of one task's runs in both arms; None when an answer's test
    predictions are missing or its runs answered other test rows."""
    scores: list[list[np.ndarray]] = []
    truth: pd.Series | None = None
    for frame in arms:
        scores.append([])
        for run_dir in frame.run_dir:
            found = None if pd.isna(run_dir) else left_out_scores(Path(str(run_dir)))
            if found is None or (truth is not None and not found[0].equals(truth)):
                return None
            truth = found[0]
            scores[-1].append(found[1])
    return gain_without_one_row(metric, gain, scores[0], scores[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("arms", type=Path, nargs="+", metavar="OFF ON",
                        help="benchmarks.run folders in pairs: the arm run with --memory off, "
                        "then the arm run with a memory (several pairs: other --split-seed)")
    parser.add_argument("-o", "--output", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if len(args.arms) % 2:
        parser.error(f"{len(args.arms)} folders: give them in pairs, OFF ON [OFF ON ...]")
    for folder in args.arms:
        if not (folder / "results.parquet").is_file():
            parser.error(f"{folder} holds no results.parquet: give benchmarks.run --out folders")
    off, on = (pd.concat([arm(folder) for folder in args.arms[side::2]], ignore_index=True)
               for side in (0, 1))
    for name, frame in (("OFF", off), ("ON", on)):
        if frame.duplicated(["task", "split_seed", "seed"]).any():
            parser.error(f"two {name} folders hold the same task, --split-seed and seed: "
                         "pair each split's runs once")
    text = table(off, on)
    print(text)
    if args.output:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
