"""How long the final selection takes on finished runs (issue 43: a budget that ends on time).

    python -m benchmarks.closing RUN [RUN ...]

For each run, from its kept predictions and nothing else (no sandbox, no training): the node
`--select confirmed` picks (`select_confirmed`, 1,000 paired bootstrap resamples of the held-out
rows per candidate) and, when that node is an ensemble, its cross-fitted score (ensemble
selection again on each group of rows), each timed; beside them, the seconds the run itself
recorded for everything after its search (`spent.closing_seconds` in its manifest). Prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from common.errors import EngineError, error_exit
from engine.evaluation.folds import dev_labels, make_folds
from engine.evaluation.select import cross_fitted_score, select_confirmed
from engine.records.runs import open_run


def measure(run: Path) -> dict[str, Any]:
    """The selection's parts on one run, timed."""
    stored = open_run(run)
    store, task, journal = stored.store, stored.task(), stored.journal
    plan = store.load_folds() or make_folds(task, 1)
    truth = dev_labels(task).iloc[plan.held_out]

    def kept(node_id: str) -> bytes | None:
        return store.read_predictions(node_id, "valid")

    start = time.perf_counter()
    winner, _ = select_confirmed(task, journal, kept, seed=0, truth=truth)
    confirmed = time.perf_counter() - start
    answer = journal.get(winner) if winner else journal.best()
    start = time.perf_counter()
    cross = cross_fitted_score(task, answer, kept, truth, plan.groups(0)) if answer else None
    crossed = time.perf_counter() - start
    spent = stored.manifest.get("spent", {})
    return {"run": run.name, "metric": task.metric.name, "nodes": len(journal),
            "winner": winner or "", "operator": answer.operator.value if answer else "",
            "confirmed_seconds": confirmed,
            "cross_fitted_seconds": crossed if cross is not None else None,
            "cross_fitted": cross, "recorded_closing_seconds": spent.get("closing_seconds")}


def table(rows: list[dict[str, Any]]) -> str:
    def seconds(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    lines = ["| run | metric | nodes | answer | select_confirmed s | cross-fitted s | "
             "closing the run recorded s |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['metric']} | {r['nodes']} | {r['winner']} ({r['operator']}) | "
              f"{seconds(r['confirmed_seconds'])} | {seconds(r['cross_fitted_seconds'])} | "
              f"{seconds(r['recorded_closing_seconds'])} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.closing",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="finished run directories")
    args = parser.parse_args(argv)
    try:
        rows = [measure(run) for run in args.runs]
    except EngineError as exc:
        return error_exit(exc)
    print(table(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
