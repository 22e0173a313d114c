"""End to end through `engine.run` (real Ray, sandbox, Parquet; scripted LLM): a plain-language
--task becomes a run with a task.yaml that runs again, and a constraint keeps a too-slow node
from being best while the summary says why; flagged nodes are listed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from engine.run import main


def _data(path: Path, rows: int = 300) -> None:
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, rows))
    y = 3 * a**2 + b + 0.1 * rng.normal(size=rows)
    pd.DataFrame({"a": a, "b": b, "c": c, "y": y}).to_csv(path, index=False)


def _only_run(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    return run


LINEAR = "Linear.\n```python\nfrom sklearn.linear_model import LinearRegression\n\n\n" \
         "def fit_predict(X, y, X_valid, X_test):\n" \
         "    model = LinearRegression().fit(X, y)\n" \
         "    return model.predict(X_valid), model.predict(X_test)\n```\n"


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_a_sentence_runs_and_its_task_yaml_runs_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    _data(tmp_path / "data" / "sales.csv")
    # The words leave the target open ("the outcome" names no column): the LLM is asked.
    script = {"request": [json.dumps({"target": "y", "sure": True, "alternatives": []})],
              "draft": [LINEAR]}
    (tmp_path / "llm.json").write_text(json.dumps(script))
    sentence = ("forecast the outcome for data/sales.csv, minimise MAE, "
                "predictions under 50 ms per row")
    # On the holdout (--folds 1): one sandbox process a node, and the task is what is checked.
    argv = ["--task", sentence, "--llm", "scripted:llm.json", "--max-nodes", "2",
            "--executors", "1", "--out", "runs", "--quiet", "--no-floor", "--no-ensemble",
            "--folds", "1"]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "target: y   (LLM)" in shown and "metric: mae   (request: 'MAE')" in shown
    run = _only_run(tmp_path / "runs")
    spec = yaml.safe_load((run / "task.yaml").read_text())
    assert spec["target"] == "y" and spec["metric"] == "mae"
    assert spec["data"] == str((tmp_path / "data" / "sales.csv").resolve())
    assert spec["max_predict_ms_per_row"] == 50.0 and spec["description"] == sentence
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["metric"] == "mae" and manifest["config"]["max_predict_ms_per_row"] == 50.0
    nodes = pd.read_parquet(run / "nodes")
    assert len(nodes) == 2 and (nodes.status == "ok").all()
    assert nodes.predict_ms_per_row.notna().all() and nodes.train_seconds.notna().all()
    assert "Constraints: predict <= 50 ms per row." in (run / "task" / "description.md").read_text()

    # Again, from the written file, elsewhere: no request parsing, the same task.
    monkeypatch.chdir(tmp_path / "data")
    assert main(["--task", str(run / "task.yaml"), "--max-nodes", "1", "--out",
                 str(tmp_path / "again"), "--quiet", "--no-floor", "--no-ensemble"]) == 0
    rerun = _only_run(tmp_path / "again")
    again = json.loads((rerun / "manifest.json").read_text())
    assert (again["target"], again["metric"], again["data_hash"]) == (
        "y", "mae", manifest["data_hash"])
    assert again["config"]["max_predict_ms_per_row"] == 50.0
    assert "asking the LLM" not in capsys.readouterr().out


def test_an_ambiguous_sentence_stops_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    _data(tmp_path / "d.csv")
    argv = ["--task", "predict b or c from d.csv", "--llm", "scripted:none.json", "--out",
            "runs"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "`b`, `c`" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


SLOW_GOOD = (
    "The right feature, slow predictions.\n```python\nimport time\n"
    "from sklearn.linear_model import LinearRegression\n\n\n"
    "class SlowLinear(LinearRegression):\n"
    "    def predict(self, X):\n"
    "        time.sleep(0.5)\n"
    "        return super().predict(X)\n\n\n"
    "def fit_predict(X, y, X_valid, X_test):\n"
    "    model = SlowLinear().fit(X.assign(a2=X.a ** 2), y)\n"
    "    return (model.predict(X_valid.assign(a2=X_valid.a ** 2)),\n"
    "            model.predict(X_test.assign(a2=X_test.a ** 2)))\n```\n"
)
NOSY = (
    "Linear on a and b, and a look around.\n```python\nimport os\n"
    "from sklearn.linear_model import LinearRegression\n\n\n"
    "def fit_predict(X, y, X_valid, X_test):\n"
    "    print(sorted(os.listdir('/'))[:3])\n"
    "    model = LinearRegression().fit(X[['a', 'b']], y)\n"
    "    return model.predict(X_valid[['a', 'b']]), model.predict(X_test[['a', 'b']])\n```\n"
)


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_a_too_slow_node_is_not_best_and_the_summary_says_why(tmp_path: Path) -> None:
    _data(tmp_path / "train.csv")
    (tmp_path / "llm.json").write_text(json.dumps({"draft": [SLOW_GOOD, LINEAR, NOSY]}))
    # Two folds, not five: a written node runs once per fold, and its speed per row is the
    # same on any.
    (tmp_path / "task.yaml").write_text(
        "data: train.csv\ntarget: y\nllm: scripted:llm.json\nnum_drafts: 3\nmax_nodes: 3\n"
        "executors: 1\nbaseline: false\nquiet: true\nmax_predict_ms_per_row: 2\n"
        "floor: false\nensemble: false\nfolds: 2\n")
    assert main(["--task", str(tmp_path / "task.yaml"), "--out", str(tmp_path / "runs")]) == 0
    run = _only_run(tmp_path / "runs")
    nodes = pd.read_parquet(run / "nodes").set_index("node_id")
    assert (nodes.status == "ok").all(), nodes.error.tolist()
    slow = nodes[nodes.code.str.contains("SlowLinear")].iloc[0]
    nosy = nodes[nodes.code.str.contains("listdir")].iloc[0]
    eligible = nodes[~nodes.code.str.contains("SlowLinear")]
    assert slow.predict_ms_per_row > 2 and (eligible.predict_ms_per_row < 2).all()
    assert slow.metric_raw < eligible.metric_raw.min() / 3  # by far the best RMSE (a² term)
    assert nosy["flags"] == "reads_outside_input" and slow["flags"] == ""
    best = json.loads((run / "best" / "node.json").read_text())
    assert best["node_id"] == eligible.metric_raw.idxmin()
    summary = (run / "summary.md").read_text()
    assert "## Excluded by constraints" in summary
    assert f"| {slow.name} | draft |" in summary and "ms per row > 2" in summary
    assert "## Verification" in summary and "reads_outside_input (/)" in summary
    good = [p.name for p in (run / "good").iterdir()]
    assert not any(slow.name in name for name in good)
