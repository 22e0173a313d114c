"""The sixteenth measurement's table: per task and fold, the floor, this LLM arm and the
fifteenth's LLM arm on the same fold, and what became of this arm's programs.

    .venv/bin/python benchmarks/results/llm-gain-2026-12-03c/table.py

Test scores and the programs' counts are the results' rows (`benchmarks.run` reads them from
each run); when and why the LLM was asked for no more is the run's manifest (`spent`), read
with `open_run` where the run folder is still on this machine ("n/a" where it is not). Signed
so that above zero the LLM arm did better.
"""

from pathlib import Path

import pandas as pd

from common.metric import METRICS, MetricSpec
from engine.records.runs import open_run

HERE = Path(__file__).resolve().parent
this = pd.read_parquet(HERE / "results.parquet")
fifteenth = pd.read_parquet(HERE.parent / "llm-gain-2026-12-03b" / "results.parquet")


def score(frame: pd.DataFrame, task: str, fold: int, method: str) -> float | None:
    rows = frame[(frame.task == task) & (frame.fold == fold) & (frame.method == method)
                 & (frame.status == "ok")]
    return None if rows.empty else float(rows.test.iloc[0])


def retired(run_dir: str) -> str:
    if not Path(run_dir).is_dir():
        return "n/a"
    spent = open_run(Path(run_dir)).manifest.get("spent", {})
    at = spent.get("llm_retired_seconds")
    return "never" if at is None else f"{at:.0f} ({spent.get('llm_retired_why', '')})"


def signed(llm: float | None, other: float | None, metric: MetricSpec) -> str:
    if llm is None or other is None:
        return "n/a"
    return f"{metric.normalise(llm) - metric.normalise(other):+.4g}"


print("| task (metric) | fold | floor | LLM | LLM − floor | 15th LLM | LLM − 15th LLM | programs "
      "proposed / refused / failed / scored / kept | answer uses a kept program | LLM asked "
      "for no more at s (why) | median LLM s per program |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for row in this[(this.method == "greedy") & (this.status == "ok")].to_dict("records"):
    task, fold, test = str(row["task"]), int(row["fold"]), float(row["test"])
    metric = METRICS[str(row["metric"])]
    floor = score(this, task, fold, "floor")
    before = score(fifteenth, task, fold, "greedy")
    counts = " / ".join(str(int(row[f"programs_{k}"]))
                        for k in ("proposed", "rejected", "failed", "scored", "kept"))
    median = row["program_llm_seconds"]
    print(f"| {task} ({row['metric']}) | {fold} | "
          f"{'n/a' if floor is None else f'{floor:.5g}'} | {test:.5g} | "
          f"{signed(test, floor, metric)} | {'n/a' if before is None else f'{before:.5g}'} | "
          f"{signed(test, before, metric)} | {counts} | "
          f"{'yes' if row['answer_uses_program'] else 'no'} | {retired(str(row['run_dir']))} | "
          f"{'n/a' if pd.isna(median) else f'{float(median):.1f}'} |")
