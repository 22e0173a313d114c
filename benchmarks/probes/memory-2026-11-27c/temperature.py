"""Offline: would a temperature fitted on a penguins answer's out-of-fold dev predictions lower
its test log loss? Arms are benchmarks.run folders.

    PYTHONPATH=. python temperature.py /tmp/exp/pg/off-split1 /tmp/exp/pg/on-split1 \
        /tmp/exp/off-s01 /tmp/exp/on-s01 > temperature.txt
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from engine.evaluation.folds import dev_labels
from engine.evaluation.scoring import read_submission
from engine.records.store import RunStore
from engine.task.prepare import PreparedTask


def probabilities(task: PreparedTask, raw: bytes | None, split: str,
                  truth: list[str]) -> tuple[np.ndarray, np.ndarray]:
    submission = read_submission(task, raw, split, rows=len(truth))
    columns = [c for c in submission.columns if c.startswith("proba_")]
    proba = np.clip(submission[columns].to_numpy(float), 1e-15, 1)
    return proba, np.array([columns.index(f"proba_{t}") for t in truth])


def log_loss(proba: np.ndarray, truth: np.ndarray, temperature: float) -> float:
    logits = np.log(proba) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    scaled = np.exp(logits)
    scaled /= scaled.sum(axis=1, keepdims=True)
    return float(-np.mean(np.log(np.clip(scaled[np.arange(len(truth)), truth], 1e-15, 1))))


for folder in sys.argv[1:]:
    results = pd.read_parquet(Path(folder) / "results.parquet")
    for row in results[results.task == "penguins"].sort_values("seed").itertuples():
        store = RunStore.open(Path(str(row.run_dir)))
        task = store.load_task()
        dev, dev_y = probabilities(task, store.read_best("valid"), "valid",
                                   dev_labels(task).reset_index(drop=True).tolist())
        test, test_y = probabilities(task, store.read_best("test"), "test",
                                     task.test_y.reset_index(drop=True).tolist())
        fitted = minimize_scalar(lambda t, p=dev, y=dev_y: log_loss(p, y, t), bounds=(0.25, 4),
                                 method="bounded").x
        print(f"{Path(folder).name} split {row.split_seed} seed {row.seed}: T = {fitted:.2f}; "
              f"out-of-fold {log_loss(dev, dev_y, 1):.5f} -> {log_loss(dev, dev_y, fitted):.5f}; "
              f"test {log_loss(test, test_y, 1):.5f} -> {log_loss(test, test_y, fitted):.5f}")
