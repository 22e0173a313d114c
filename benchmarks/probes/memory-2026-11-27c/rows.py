"""Each penguins answer's test log loss per row: which rows carry it, and the mean without the
two costliest. Arms are benchmarks.run folders.

    PYTHONPATH=. python rows.py /tmp/exp/off-s01 /tmp/exp/on-s01 > rows.txt
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from engine.evaluation.scoring import read_submission
from engine.records.store import RunStore

for folder in sys.argv[1:]:
    results = pd.read_parquet(Path(folder) / "results.parquet")
    for row in results[results.task == "penguins"].sort_values("seed").itertuples():
        store = RunStore.open(Path(str(row.run_dir)))
        task = store.load_task()
        answer = read_submission(task, store.read_best("test"), "test")
        truth = task.test_y.reset_index(drop=True).tolist()
        columns = [c for c in answer.columns if c.startswith("proba_")]
        proba = answer[columns].to_numpy(float)
        given = proba[np.arange(len(truth)), [columns.index(f"proba_{t}") for t in truth]]
        loss = -np.log(np.clip(given, 1e-15, 1))
        top = np.argsort(-loss)[:3]
        costliest = [(int(i), round(float(loss[i]), 3)) for i in top]
        print(f"{Path(folder).name:9s} split {row.split_seed} seed {row.seed}: test "
              f"{loss.mean():.5f} over {len(loss)} rows; costliest rows {costliest}; "
              f"mean without the two costliest {np.sort(loss)[:-2].sum() / len(loss):.5f}")
