"""A run's answer as a folder to deploy: `python -m engine.export model runs/<id> -o DIR`.

The folder predicts without this project installed, in a venv made from its own
requirements.txt:

    solution.py          the answer's code (best/solution.py)
    replay.py            runs it with every fit restored (operators/fitted.py, load mode)
    model/fold-<i>.pkl   the saved fits of each model (best/model/)
    data/train-<i>.csv   only for a replay (LLM-written code): the rows each model learned
                         from, byte for byte, from which the replay recomputes the solution's
                         feature preparation; a fitted make_model() needs no training rows
    model.json           target, features, task type, labels, how many models
    predict.py           `python predict.py rows.csv -o out.csv` (engine/deploy/bundle_predict.py)
    requirements.txt     numpy, pandas, scikit-learn and the solution's imports, at the
                         versions this run used (pickles need the versions that wrote them)
    README.md            the same, and who loads the pickles: the user, outside any sandbox

The folder is written under a temporary name and renamed, so it is whole or absent.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from common.errors import UserError
from engine.deploy.saved_model import saved_rows, saved_states, training_inputs
from engine.records.runs import open_run
from fileio import replacing_dir
from operators.fitted import LOAD, fitted_objects, fitted_wrapper

ALWAYS = ("numpy", "pandas", "scikit-learn")  # the replay's own needs; sklearn finds the fits

_README = """# {name}: an exported treeml model

The answer of run `{run}` ({operator} node `{node}`, {metric} on the test split: {test}),
predicting `{target}` ({task_type}). {models} model(s), fitted on {training}.

```bash
python -m venv .venv && .venv/bin/pip install -r requirements.txt
.venv/bin/python predict.py new_rows.csv -o predictions.csv
```

or from Python, in this folder: `from predict import predict; predict(frame)`.

New rows need the training features ({count} columns, see `model.json`); a target column is
ignored. Nothing trains: {how}

**Loading this model runs code.** The pickles in `model/` were written by code that an LLM
search generated, and `solution.py` is that code. treeml only ever loaded them inside its
sandbox; `predict.py` runs them as an ordinary process. Where that happens is your decision:
run it only where you would run `solution.py` itself. Use the Python version this run used
({python}) and the versions in requirements.txt: pickles are read by the code that wrote them.
"""


def requirements(code: str) -> list[str]:
    """`name==version` of numpy, pandas, scikit-learn and every installed distribution the
    solution imports (the standard library left out)."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module.split(".")[0])
    owners = importlib.metadata.packages_distributions()
    names = set(ALWAYS)
    for module in modules - set(sys.stdlib_module_names):
        names.update(owners.get(module, []))
    pins = []
    for name in sorted(names, key=str.lower):
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return pins


def export_model(run: Path, out: Path) -> dict[str, Any]:
    """Write the deployable folder of `run` to `out`; returns what went in."""
    opened = open_run(run)
    task = opened.task()
    best = run / "best"
    states = saved_states(best)
    if states is None:
        raise UserError(f"{run} has no saved model in best/model/ (a run made with "
                        "--no-save-model or before models were saved, or an answer whose fits "
                        "could not be saved: see summary.md); resume the run to save one")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already exists and is not empty; pass a new folder with -o")
    code = (best / "solution.py").read_text(encoding="utf-8")
    node = json.loads((best / "node.json").read_text())
    record = json.loads((best / "model" / "model.json").read_text())
    features = [str(c) for c in task.train.columns if c != task.target]
    info = {
        "run": run.name, "node_id": node["node_id"], "target": task.target,
        "task_type": task.task_type, "metric": task.metric.name,
        "labels": list(task.labels), "features": features,
        "numeric": [c for c in features if pd.api.types.is_numeric_dtype(task.train[c])],
        "models": len(states), "training": record["training"],
        "python": ".".join(map(str, sys.version_info[:3])),
    }
    pins = requirements(code)
    test = opened.manifest.get("result", {}).get("best_test")
    # A fitted make_model() predicts from its state alone: the training rows stay home.
    replay = not fitted_objects(states)
    how = ("`solution.py` runs on the rows each model learned from (`data/`), with every "
           "model fit restored from `model/` instead of computed." if replay else
           "each model in `model/` is the fitted model itself, and predicting reads no "
           "training rows (none are in this folder).")
    with replacing_dir(out) as staging:  # `out` is absent or empty, checked above
        (staging / "model").mkdir()
        for index, state in enumerate(states):
            (staging / "model" / f"fold-{index}.pkl").write_bytes(state)
        if replay:
            (staging / "data").mkdir()
            for index, inputs in enumerate(training_inputs(task, opened.store.load_folds(),
                                                           saved_rows(best))):
                (staging / "data" / f"train-{index}.csv").write_bytes(inputs["train.csv"])
        (staging / "solution.py").write_text(code, encoding="utf-8")
        (staging / "replay.py").write_text(fitted_wrapper(LOAD), encoding="utf-8")
        shutil.copy(Path(__file__).with_name("bundle_predict.py"), staging / "predict.py")
        (staging / "model.json").write_text(json.dumps(info, indent=2) + "\n")
        (staging / "requirements.txt").write_text("\n".join(pins) + "\n")
        (staging / "README.md").write_text(_README.format(
            name=out.name, run=run.name, operator=node.get("operator", ""), node=node["node_id"],
            metric=task.metric.name, test="n/a" if test is None else f"{test:.5g}",
            target=task.target, task_type=task.task_type, models=len(states),
            training=record["training"], count=len(features), python=info["python"],
            how=how))
    return {"models": len(states), "requirements": pins,
            "bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}
