"""predict.py of a model exported by `python -m engine.export model` (engine/deploy/bundle.py).

This file is copied as it is into the exported folder, which it needs and nothing else: no
treeml, only the packages of the folder's requirements.txt.

    python predict.py new_rows.csv -o predictions.csv

or, from Python, next to this file: `from predict import predict; predict(frame)`.

`replay.py` loads every saved model in one process, and nothing trains. A model the engine
wrote is the fitted object itself (`model/fold-<i>.pkl`), which predicts the new rows alone.
A model with LLM-written code is that code (`solution.py`) run on the rows it learned from
(`data/train-<i>.csv`) with every fit restored from `model/fold-<i>.pkl`: the code recomputes
its feature preparation from the training rows and each model predicts the new rows.
Several models (one per cross-validation fold) are combined as the run combined them: numbers
and class probabilities averaged (the label then the most probable class), labels alone by vote (a
tie to the label first in `model.json`'s order).

Loading the model runs code: the pickles were written by code a search generated, and the
solution is that code. In the engine they are only ever loaded inside its sandbox; here, where
they run is your decision. Run this only where you would run `solution.py` itself.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent


def meta() -> dict:
    return json.loads((HERE / "model.json").read_text(encoding="utf-8"))


def checked(rows: pd.DataFrame, info: dict) -> pd.DataFrame:
    """The rows with exactly the training features, in training order (a target column is
    dropped); missing or extra columns, or text where training had numbers, raise
    ValueError."""
    rows = rows.rename(columns=str)
    features, target = info["features"], info["target"]
    given = [c for c in rows.columns if c != target]
    missing = [c for c in features if c not in given]
    extra = [c for c in given if c not in features]
    if missing or extra:
        raise ValueError(f"the rows do not match the training features: missing {missing}, "
                         f"extra {extra} (expected: {features})")
    rows = rows[features]
    numeric = info["numeric"]
    text = [c for c in numeric if not pd.api.types.is_numeric_dtype(rows[c])
            and pd.to_numeric(rows[c], errors="coerce").isna().gt(rows[c].isna()).any()]
    if text:
        raise ValueError(f"columns {text} held numbers in training but hold text here")
    return rows.assign(**{c: pd.to_numeric(rows[c]) for c in numeric})


def combine(parts: list[pd.DataFrame], info: dict) -> pd.DataFrame:
    if len(parts) == 1:
        return parts[0]
    if info["task_type"] == "regression":
        return pd.DataFrame({"prediction": np.mean(
            [p["prediction"].to_numpy(dtype=float) for p in parts], axis=0)})
    # "proba_" mirrors search.node.PROBA_PREFIX: this file is copied into bundles and imports
    # nothing of ours.
    columns = [c for c in parts[0].columns if c.startswith("proba_")]
    if columns:
        proba = pd.DataFrame({c: np.mean([p[c].to_numpy(dtype=float) for p in parts], axis=0)
                              for c in columns})
        classes = np.asarray([c[len("proba_"):] for c in columns], dtype=object)
        return pd.concat([pd.DataFrame({"prediction": classes[proba.to_numpy().argmax(axis=1)]}),
                          proba], axis=1)
    order = {str(v): i for i, v in enumerate(info["labels"])}
    votes = np.zeros((len(parts[0]), len(order)))
    for part in parts:
        columns_hit = np.asarray([order[str(v)] for v in part["prediction"]], dtype=int)
        votes[np.arange(len(part)), columns_hit] += 1
    labels = np.asarray(list(order), dtype=object)
    return pd.DataFrame({"prediction": labels[votes.argmax(axis=1)]})


def predict(rows: pd.DataFrame) -> pd.DataFrame:
    """One prediction per row of `rows` (the training features), with probabilities per
    class when the answer gives them."""
    info = meta()
    new = checked(rows, info).to_csv(index=False, lineterminator="\n").encode("utf-8")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "input").mkdir()
        (work / "submission").mkdir()
        for i in range(info["models"]):
            if (HERE / "data").is_dir():  # a replay's: a fitted model reads no training rows
                shutil.copy(HERE / "data" / f"train-{i}.csv", work / "input" / f"train-{i}.csv")
            shutil.copy(HERE / "model" / f"fold-{i}.pkl", work / "input" / f"fitted-{i}.pkl")
        (work / "input" / "valid.csv").write_bytes(new)
        (work / "input" / "test.csv").write_bytes(new)
        shutil.copy(HERE / "solution.py", work / "input" / "solution.py")
        shutil.copy(HERE / "replay.py", work / "replay.py")
        done = subprocess.run([sys.executable, "replay.py"], cwd=work, capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
            raise RuntimeError(f"the model failed: {last}")
        stacked = pd.read_csv(work / "submission" / "valid.csv")
    parts = [block.drop(columns=["fold"]).reset_index(drop=True)
             for _, block in stacked.groupby("fold", sort=True)]
    return combine(parts, info)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Predict new rows with the exported model.")
    parser.add_argument("rows", type=Path, help="CSV of new rows with the training features")
    parser.add_argument("-o", "--output", type=Path, default=Path("predictions.csv"),
                        help="where the predictions go (default: predictions.csv)")
    args = parser.parse_args(argv)
    try:
        rows = pd.read_csv(args.rows, low_memory=False, encoding="utf-8-sig")
        predictions = predict(rows)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    predictions.to_csv(args.output, index=False)
    print(f"wrote {len(predictions)} predictions to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
