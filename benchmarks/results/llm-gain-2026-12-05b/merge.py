"""The nineteenth measurement's results.parquet: the LLM runs of /work/bench64 (the gate's
pairs in two runs, `10593b9`) and the eighteenth's floor rows (the seventeenth's), each row's
executors' seconds (all, and on feature programs) read from its run folder where it is still
on this machine. Prints the LLM arm's share of the executors' time on programs, here and in
the eighteenth's runs (/work/bench63), per task and fold.

    RAY_AUTH_MODE=disabled .venv/bin/python benchmarks/results/llm-gain-2026-12-05b/merge.py
"""

from pathlib import Path

import pandas as pd

from benchmarks.table import measure_run

HERE = Path(__file__).resolve().parent


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    for column in ("exec_seconds", "program_exec_seconds"):
        rows[column] = rows.get(column, pd.Series(index=rows.index, dtype=float)).astype(float)
    for i, row in rows.iterrows():
        if Path(row.run_dir).is_dir():
            again = measure_run(Path(row.run_dir))
            for column in ("exec_seconds", "program_exec_seconds"):
                rows.at[i, column] = again[column]
    return rows


new = measured(pd.read_parquet("/work/bench64/results.parquet"))
old = pd.read_parquet(HERE.parent / "llm-gain-2026-12-05" / "results.parquet")
out = pd.concat([new, measured(old[old.method == "floor"])], ignore_index=True)
out.to_parquet(HERE / "results.parquet")
print(len(out), out.groupby("method").size().to_dict())
before = measured(pd.read_parquet("/work/bench63/results.parquet"))
print("| task | fold | programs' share of the executors' time, 18th (both pairs in one run) "
      "| 19th (two runs) | programs scored 18th / 19th | executors' seconds a scored program, "
      "18th / 19th |")
print("|---|---|---|---|---|---|")


def share(row: dict) -> str:
    return f"{float(row['program_exec_seconds']) / float(row['exec_seconds']):.0%}"


def per_program(row: dict) -> str:
    return f"{float(row['program_exec_seconds']) / max(int(row['programs_scored']), 1):.1f}"


for row in new.sort_values(["fold", "task"]).to_dict("records"):
    (then,) = before[(before.task == row["task"]) & (before.fold == row["fold"])].to_dict("records")
    print(f"| {row['task']} | {row['fold']} | {share(then)} | {share(row)} | "
          f"{then['programs_scored']} / {row['programs_scored']} | {per_program(then)} / "
          f"{per_program(row)} |")
