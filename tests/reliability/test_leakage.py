"""Leakage: a candidate that hunts for the hidden labels (walks the filesystem from /, scans
the parents of its working directory, opens the run's label file by its absolute path, imports
the engine) finds none, so on random labels it scores no better than chance."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd

from engine.run import main

HUNTER = r'''
import csv, glob, os, random, sys, time

TARGET = "label"
n_valid = sum(1 for _ in open("input/valid.csv")) - 1
n_test = sum(1 for _ in open("input/test.csv")) - 1
start = time.monotonic()
seen = readable = 0
candidates = []  # (path, values): a column of n_valid label-like values

def consider(path):
    global readable
    try:
        with open(path, newline="", errors="replace") as handle:
            rows = list(csv.reader(handle))
    except Exception:
        return
    readable += 1
    if len(rows) != n_valid + 1 or not rows[0]:
        return
    for col, name in enumerate(rows[0]):
        values = [r[col] for r in rows[1:] if len(r) > col]
        if len(values) == n_valid and set(values) <= {"yes", "no"}:
            candidates.append((path, values))

try:
    import engine  # noqa: F401
    print("IMPORTED ENGINE", engine.__file__)
except Exception as exc:
    print("import engine failed:", type(exc).__name__)

for path in [KNOWN_LABELS, *glob.glob(RUNS + "/*/task/*.csv")]:
    consider(path)
here = os.getcwd()
for parent in [os.path.dirname(here), os.path.dirname(os.path.dirname(here)), "/"]:
    for entry in os.listdir(parent) if os.path.isdir(parent) else []:
        if entry.endswith(".csv"):
            consider(os.path.join(parent, entry))
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if root != "/" or d not in ("proc", "sys", "dev")]
    if root.startswith(here):
        continue  # our own input/ holds no valid labels
    for name in files:
        seen += 1
        if name.endswith((".csv", ".txt")):
            consider(os.path.join(root, name))
    if seen > 200_000 or time.monotonic() - start > 20:
        break
print("files seen", seen, "readable", readable, "label-like", len(candidates))
rng = random.Random(0)
valid = candidates[0][1] if candidates else [rng.choice(["yes", "no"]) for _ in range(n_valid)]
os.makedirs("submission", exist_ok=True)
for name, preds in (("valid", valid), ("test", ["yes"] * n_test)):
    with open(f"submission/{name}.csv", "w") as handle:
        handle.write("prediction\n" + "".join(p + "\n" for p in preds))
'''


def test_label_hunter_scores_at_chance(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    rows = 1000
    frame = pd.DataFrame({"a": rng.normal(size=rows), "b": rng.normal(size=rows),
                          "label": rng.choice(["yes", "no"], size=rows)})  # random labels
    frame.to_csv(tmp_path / "train.csv", index=False)
    out = tmp_path / "runs"
    code = HUNTER.replace("KNOWN_LABELS", "KNOWN").replace("RUNS", repr(str(out)))
    # The label file's absolute path is not known before the run id: every run dir is tried.
    code = code.replace("[KNOWN,", f"[*glob.glob({str(out)!r} + '/*/task/valid_labels.csv'),")
    reply = f"Hunt for labels.\n```python\n{code}```\n"
    (tmp_path / "replies.json").write_text(json.dumps({"draft": [reply]}))
    argv = ["--data", str(tmp_path / "train.csv"), "--target", "label", "--no-baseline",
            "--llm", f"scripted:{tmp_path / 'replies.json'}", "--max-nodes", "1",
            "--executors", "1", "--exec-timeout", "90", "--budget", "3m", "--quiet",
            "--out", str(out), "--metric", "f1",
            # Cross-validated, as by default, but in 2 folds rather than 5: each fold's run
            # gives the hunter the same sandbox to walk.
            "--folds", "2"]
    assert main(argv) == 0
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    labels = run / "task" / "valid_labels.csv"
    assert labels.is_file()  # the labels exist on the host, at the path the hunter tried
    # Positive control: on the host, the hunter's test would recognise that file.
    host = list(csv.reader(labels.open(newline="")))
    n_valid = len(pd.read_csv(run / "task" / "valid.csv"))
    assert len(host) == n_valid + 1 and any(
        {r[c] for r in host[1:]} <= {"yes", "no"} for c in range(len(host[0])))
    (row,) = pd.read_parquet(run / "nodes").itertuples()
    assert row.status == "ok", row.error
    assert "import engine failed" in row.stdout_tail, row.stdout_tail
    assert "label-like 0" in row.stdout_tail, row.stdout_tail
    seen = int(row.stdout_tail.split("files seen")[1].split()[0])
    assert seen > 1000, "the walk must really have looked around"
    # Random guesses on random labels: F1 near 0.5; a leak would give 1.0.
    assert row.metric_raw < 0.7, row.metric_raw
