"""When would a rule that reads the gate's record have stopped asking the LLM, on these runs?

    .venv/bin/python benchmarks/results/llm-gain-2026-12-03b/record_rule.py RUN_DIR [RUN_DIR ...]

The rule (not in the engine): from the `m`-th program scored with fresh pairs on, stop as soon
as the programs better by the mean are not more than a coin toss gives, by the one-sided sign
test at `alpha`. Each cell: the scored program and the second of the run it would stop at, or
"-" for never. Chosen on these same runs: a sketch for the next lever, not a measurement of it.
"""

import glob
import json
import sys

import pandas as pd
from scipy.stats import binomtest

records = {}
for run in sys.argv[1:]:
    nodes = pd.concat(map(pd.read_parquet, glob.glob(f"{run}/nodes/*.parquet")))
    programs = nodes[nodes.operator == "features"].sort_values("finished_at")
    record = []
    for _, node in programs.iterrows():
        gate = json.loads(node.gate) if node.gate else {}
        if gate.get("pairs"):
            record.append((sum(gate["gains"]) > 0, node.finished_at - nodes.created_at.min()))
    records[run.split("/runs/")[-1].split("/greedy")[0]] = record

print("m alpha " + " ".join(records))
for m in (6, 8, 10):
    for alpha in (0.2, 0.5):
        cells = []
        for record in records.values():
            stop = next((f"{i}@{record[i - 1][1]:.0f}s" for i in range(m, len(record) + 1)
                         if binomtest(sum(b for b, _ in record[:i]), i, 0.5,
                                      alternative="greater").pvalue > alpha), "-")
            cells.append(stop)
        print(m, alpha, " ".join(cells))
