"""The twentieth measurement's results.parquet: the nineteenth's LLM rows (run on this machine at
`10593b9`) and the floor arm run again on this machine (/work/bench65), each floor row's
executors' seconds (all, and on feature programs: none) read from its run folder. Prints the
floor against itself: this machine's floor beside the floor rows the nineteenth compared
with (the seventeenth's, a third of them from this machine, the rest from one about twice as
fast), per task and fold, so that the floor's own spread between two sittings is on record
beside the LLM's difference.

    RAY_AUTH_MODE=disabled .venv/bin/python benchmarks/results/llm-gain-2026-12-05c/merge.py
"""

from pathlib import Path

import pandas as pd

from benchmarks.table import measure_run
from common.metric import METRICS

HERE = Path(__file__).resolve().parent
NINETEENTH = pd.read_parquet(HERE.parent / "llm-gain-2026-12-05b" / "results.parquet")


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    for i, row in rows.iterrows():
        again = measure_run(Path(row.run_dir))
        for column in ("exec_seconds", "program_exec_seconds"):
            rows.at[i, column] = again[column]
    return rows


floor = measured(pd.read_parquet("/work/bench65/results.parquet"))
out = pd.concat([NINETEENTH[NINETEENTH.method != "floor"], floor], ignore_index=True)
out.to_parquet(HERE / "results.parquet")
print(len(out), out.groupby("method").size().to_dict())
before = NINETEENTH[NINETEENTH.method == "floor"]
print("| task | fold | metric | floor here (nodes) | floor the nineteenth compared with (nodes, "
      "started) | difference, signed so that above zero here did better |")
print("|---|---|---|---|---|---|")
for row in floor.sort_values(["fold", "task"]).to_dict("records"):
    (then,) = before[(before.task == row["task"]) & (before.fold == row["fold"])].to_dict("records")
    gain = METRICS[row["metric"]].normalise(row["test"] - then["test"])
    day = pd.to_datetime(then["started_at"], unit="s")
    print(f"| {row['task']} | {row['fold']} | {row['metric']} | {row['test']:.5g} "
          f"({row['nodes']}) | {then['test']:.5g} ({then['nodes']}, {day:%Y-%m-%d}) | "
          f"{gain:+.4g} |")
