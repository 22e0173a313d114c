"""The gate's record over the runs named (run folders of LLM searches), read as the engine reads
a run (`open_run`, `gate_of`).

    .venv/bin/python benchmarks/results/llm-gain-2026-12-03b/gate_record.py RUN_DIR [RUN_DIR ...]

Per run: the programs scored with fresh pairs, how many were better by the mean over their
folds (and the one-sided sign test of that against a coin toss), how many were kept and how
many of those were better than their reference on the test rows. Then all runs together: on
how many of its 5 folds each program was better, against coin tosses. Last, when a rule that
reads this record would have stopped asking the LLM (not in the engine): from the `m`-th
scored program on, stop as soon as the sign test's p is above `alpha`; each cell is the scored
program and the second of the run it would stop at, or "-" for never. The rule was chosen on
these same runs: a sketch for the next lever, not a measurement of it.
"""

import collections
import math
import sys
from pathlib import Path

from scipy.stats import binomtest

from common.metric import METRICS
from engine.records.runs import open_run
from search.node import Operator
from search.programs import TIE, gate_of


def sign_test(better: int, scored: int) -> float:
    return float(binomtest(better, scored, 0.5, alternative="greater").pvalue)


folds_better: collections.Counter[int] = collections.Counter()
records = {}  # run -> (better by the mean, second of the run) per scored program, in order
for path in sys.argv[1:]:
    run = open_run(Path(path))
    sign = 1 if METRICS[run.manifest["metric"]].maximize else -1
    start = min(n.created_at for n in run.journal)
    record, kept = [], []
    for node in sorted(run.journal.nodes_of(Operator.FEATURES), key=lambda n: n.finished_at):
        gate = gate_of(node)
        if gate is None or not gate.pairs:
            continue
        record.append((gate.mean_gain > 0, node.finished_at - start))
        if len(gate.gains) == 5:
            folds_better[sum(g > TIE for g in gate.gains)] += 1
        if gate.kept:
            test, reference = run.tests.get(node.node_id), run.tests.get(gate.reference)
            kept.append(test is not None and reference is not None
                        and sign * (test - reference) > 0)
    name = path.split("/runs/")[-1].split("/greedy")[0]
    records[name] = record
    if record:
        better = sum(b for b, _ in record)
        print(f"{name:28s} scored {len(record):3d}  better by the mean {better:3d} "
              f"(sign test p {sign_test(better, len(record)):.3f})  kept {len(kept)}, "
              f"better on test {sum(kept)}")

n = sum(folds_better.values())
print(n, "programs; folds better:", {k: f"{folds_better[k]} ({folds_better[k] / n:.0%}, coin "
                                        f"tosses {math.comb(5, k) / 32:.0%})" for k in range(6)})

print("m alpha " + " ".join(records))
for m in (6, 8, 10):
    for alpha in (0.2, 0.5):
        cells = [next((f"{i}@{record[i - 1][1]:.0f}s" for i in range(m, len(record) + 1)
                       if sign_test(sum(b for b, _ in record[:i]), i) > alpha), "-")
                 for record in records.values()]
        print(m, alpha, " ".join(cells))
