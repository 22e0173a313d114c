"""The eighteenth measurement's results.parquet: the LLM runs of /work/bench63 (their
answer_uses_program and answer_unkept_share read again at 754af6c) and the seventeenth's
floor rows. Prints each count that changed.

    RAY_AUTH_MODE=disabled .venv/bin/python benchmarks/results/llm-gain-2026-12-05/merge.py
"""

from pathlib import Path

import pandas as pd

from benchmarks.table import measure_run

new = pd.read_parquet('/work/bench63/results.parquet')
for i, r in new.iterrows():
    m = measure_run(Path(r.run_dir))
    for c in ('answer_uses_program', 'answer_unkept_share'):
        if new.at[i, c] != m[c]:
            print(r.task, r.fold, c, new.at[i, c], '->', m[c])
        new.at[i, c] = m[c]
old = pd.read_parquet('benchmarks/results/llm-gain-2026-12-04/results.parquet')
out = pd.concat([new, old[old.method == 'floor']], ignore_index=True)
out.to_parquet('benchmarks/results/llm-gain-2026-12-05/results.parquet')
print(len(out), out.groupby('method').size().to_dict())
