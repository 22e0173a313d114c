# The gate's record over the runs named (run folders of LLM searches): how many of its 5 folds
# each program scored with fresh pairs was better on, against coin tosses, and how many kept
# programs were better than their reference on the test rows. Run from the repository root.
.venv/bin/python - "$@" <<'PY'
import glob, json, sys, math, collections
import pandas as pd
from common.metric import METRICS
counts, kept_better = collections.Counter(), []
for run in sys.argv[1:]:
    nodes = pd.concat(map(pd.read_parquet, glob.glob(f"{run}/nodes/*.parquet"))).set_index("node_id")
    sign = 1 if METRICS[json.load(open(f"{run}/manifest.json"))["metric"]].maximize else -1
    for _, node in nodes[nodes.operator == "features"].iterrows():
        gate = json.loads(node.gate) if node.gate else {}
        if gate.get("pairs") and len(gate["gains"]) == 5:
            counts[sum(g > 1e-9 for g in gate["gains"])] += 1
            diff = sign * (node.test_metric_raw - nodes.loc[gate["reference"]].test_metric_raw)
            if gate["kept"] and not math.isnan(diff):
                kept_better.append(diff > 0)
n = sum(counts.values())
print(n, "programs; groups better:", {k: f"{counts[k]} ({counts[k]/n:.0%}, chance {math.comb(5, k)/32:.0%})" for k in range(6)})
print(f"kept {len(kept_better)}, of which better than their reference on test {sum(kept_better)}")
PY
