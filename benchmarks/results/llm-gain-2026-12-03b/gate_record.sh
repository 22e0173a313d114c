# The gate's record over the runs named (run folders of LLM searches). Per run: the programs
# scored with fresh pairs, how many were better by the mean over their folds (and the one-sided
# sign test of that against a coin toss), how many were kept and how many of those were better
# than their reference on the test rows. Then all runs together: on how many of its 5 folds
# each program was better, against coin tosses. Run from the repository root.
.venv/bin/python - "$@" <<'PY'
import collections, glob, json, math, sys
import pandas as pd
from scipy.stats import binomtest
from common.metric import METRICS
counts = collections.Counter()
for run in sys.argv[1:]:
    nodes = pd.concat(map(pd.read_parquet, glob.glob(f"{run}/nodes/*.parquet"))).set_index("node_id")
    sign = 1 if METRICS[json.load(open(f"{run}/manifest.json"))["metric"]].maximize else -1
    scored = positive = kept = kept_better = 0
    for _, node in nodes[nodes.operator == "features"].iterrows():
        gate = json.loads(node.gate) if node.gate else {}
        if not gate.get("pairs") or len(gate["gains"]) != 5:
            continue
        scored += 1
        positive += sum(gate["gains"]) > 0
        counts[sum(g > 1e-9 for g in gate["gains"])] += 1
        diff = sign * (node.test_metric_raw - nodes.loc[gate["reference"]].test_metric_raw)
        kept += gate["kept"]
        kept_better += bool(gate["kept"] and diff > 0)
    if scored:
        p = binomtest(positive, scored, 0.5, alternative="greater").pvalue
        print(f"{run.split('/runs/')[-1][:28]:28s} scored {scored:3d}  better by the mean {positive:3d} "
              f"(sign test p {p:.3f})  kept {kept}, better on test {kept_better}")
n = sum(counts.values())
print(n, "programs; folds better:", {k: f"{counts[k]} ({counts[k]/n:.0%}, coin tosses {math.comb(5, k)/32:.0%})" for k in range(6)})
PY
