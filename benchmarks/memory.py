"""Does the solution memory pay off? The paired table of two benchmark arms (issue 21).

    python -m benchmarks.memory runs/bench-mem/off runs/bench-mem/on -o report.md

Each arm is a `benchmarks.run` output folder (results.parquet and its runs) of the same tasks
and seeds, one made with `--memory off`, one with a memory (leave-one-task-out by
construction: a task never retrieves its own cases, engine/memory.py). Per task and arm:
- drafts (generated and recall roots) that ran ok without a debug step, of those that ran;
- seconds until the first LLM-written node (draft, recall, improve, debug) beat the baseline
  root's valid score, from the run's start;
- the answer's test score.
The totals give each share with its 95% Wilson interval and the tasks where the memory arm
was faster or better, with an exact sign test: with one seed and six tasks, say so plainly
where it cannot separate the arms.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.stats import share, sign_test
from engine.runs import open_run
from search.metric import METRICS
from search.node import Operator

LLM_WRITTEN = (Operator.DRAFT, Operator.RECALL, Operator.IMPROVE, Operator.DEBUG)


def measure(run_dir: Path) -> dict[str, Any]:
    """One run's draft success and time to the first LLM-written node that beat the
    baseline root."""
    run = open_run(run_dir)
    nodes = list(run.journal)
    start = min((n.created_at for n in nodes if n.created_at), default=0.0)
    drafts = [n for n in run.journal.draft_nodes if n.code and (n.exec_seconds > 0 or n.is_ok)]
    recalls = [n for n in drafts if n.operator is Operator.RECALL]
    base = next((n for n in nodes if n.operator is Operator.BASELINE and n.is_ok), None)
    beaten = [n.finished_at - start for n in nodes
              if n.operator in LLM_WRITTEN and n.is_ok and base is not None
              and base.metric is not None and (n.metric or 0.0) > base.metric]
    return {"drafts_ok": sum(n.is_ok for n in drafts), "drafts": len(drafts),
            "recalls_ok": sum(n.is_ok for n in recalls), "recalls": len(recalls),
            "first_beat": min(beaten) if beaten else None}


def arm(folder: Path) -> pd.DataFrame:
    results = pd.read_parquet(folder / "results.parquet")
    results = results[results.kind == "policy"]
    rows = []
    for row in results.itertuples():
        run_dir = Path(str(row.run_dir))
        rows.append({"task": row.task, "seed": row.seed, "metric": row.metric,
                     "test": row.test, **measure(run_dir)})
    return pd.DataFrame(rows)


def _or_never(value: Any) -> float:
    return float("inf") if value is None or pd.isna(value) else float(value)


def _seconds(value: Any) -> str:
    seconds = _or_never(value)
    return "never" if seconds == float("inf") else f"{seconds:.0f} s"


def table(off: pd.DataFrame, on: pd.DataFrame) -> str:
    paired = off.merge(on, on=["task", "seed", "metric"], suffixes=("_off", "_on"))
    lines = ["| task | metric | drafts ok, off | drafts ok, on (recall) | first beat, off | "
             "first beat, on | test, off | test, on |", "|---|---|---|---|---|---|---|---|"]
    faster = slower = better = worse = 0
    for r in paired.to_dict("records"):
        lines.append(
            f"| {r['task']} | {r['metric']} | {r['drafts_ok_off']}/{r['drafts_off']} | "
            f"{r['drafts_ok_on']}/{r['drafts_on']} ({r['recalls_ok_on']}/{r['recalls_on']}) | "
            f"{_seconds(r['first_beat_off'])} | {_seconds(r['first_beat_on'])} | "
            f"{r['test_off']:.4g} | {r['test_on']:.4g} |")
        a, b = _or_never(r["first_beat_off"]), _or_never(r["first_beat_on"])
        faster += b < a
        slower += b > a
        sign = 1 if METRICS[str(r["metric"])].maximize else -1
        gain = sign * (float(r["test_on"]) - float(r["test_off"]))
        better += gain > 1e-12
        worse += gain < -1e-12
    off_share = share(int(paired.drafts_ok_off.sum()), int(paired.drafts_off.sum()))
    on_share = share(int(paired.drafts_ok_on.sum()), int(paired.drafts_on.sum()))
    recall_share = share(int(paired.recalls_ok_on.sum()), int(paired.recalls_on.sum()))
    lines += [
        "",
        f"- drafts that ran without a debug step: off {off_share}; on {on_share} (recall "
        f"drafts alone: {recall_share})",
        f"- first LLM-written node beating the baseline root: sooner with memory on {faster} "
        f"of {len(paired)} tasks, later on {slower} (sign test p = "
        f"{sign_test(faster, slower):.2f})",
        f"- answer's test score: better with memory on {better} of {len(paired)} tasks, worse "
        f"on {worse} (sign test p = {sign_test(better, worse):.2f})",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("off", type=Path, help="the arm run with --memory off")
    parser.add_argument("on", type=Path, help="the arm run with a memory")
    parser.add_argument("-o", "--output", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    text = table(arm(args.off), arm(args.on))
    print(text)
    if args.output:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
