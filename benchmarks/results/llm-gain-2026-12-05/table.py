"""The eighteenth measurement's table: per task and fold, the floor and the LLM arm, when each
was run, and what became of the LLM arm's programs.

    .venv/bin/python benchmarks/results/llm-gain-2026-12-05/table.py

Everything is the results' rows (`benchmarks.run` reads them from each run, when and why the
LLM was asked for no more included): no run folder is read. Signed so that above zero the LLM
arm did better.
"""

from pathlib import Path

import pandas as pd

from common.metric import METRICS

HERE = Path(__file__).resolve().parent
rows = pd.read_parquet(HERE / "results.parquet")
rows = rows[rows.status == "ok"]


def started(row: dict) -> str:
    return pd.Timestamp(row["started_at"], unit="s").strftime("%m-%d %H:%M")


def retired(row: dict) -> str:
    at = row["llm_retired_seconds"]
    return "never" if pd.isna(at) else f"{at:.0f} ({row['llm_retired_why']})"


print("| task (metric) | fold | floor | LLM | LLM − floor | floor run started (UTC) | LLM run "
      "started | programs proposed / refused / failed / scored / kept | answer uses a kept "
      "program | LLM asked for no more at s (why) | median LLM s per program |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for llm in rows[rows.method == "greedy"].sort_values(["fold", "task"]).to_dict("records"):
    task, fold = str(llm["task"]), int(llm["fold"])
    (floor,) = rows[(rows.task == task) & (rows.fold == fold)
                    & (rows.method == "floor")].to_dict("records")
    metric = METRICS[str(llm["metric"])]
    gain = metric.normalise(float(llm["test"])) - metric.normalise(float(floor["test"]))
    counts = " / ".join(str(int(llm[f"programs_{k}"]))
                        for k in ("proposed", "rejected", "failed", "scored", "kept"))
    median = llm["program_llm_seconds"]
    print(f"| {task} ({llm['metric']}) | {fold} | {float(floor['test']):.5g} | "
          f"{float(llm['test']):.5g} | {gain:+.4g} | {started(floor)} | {started(llm)} | "
          f"{counts} | {'yes' if llm['answer_uses_program'] else 'no'} | {retired(llm)} | "
          f"{'n/a' if pd.isna(median) else f'{float(median):.1f}'} |")
