"""The whole slice for real: CLI -> Ray actors -> real sandbox -> driver scoring -> Parquet.

Only the LLM is scripted. A buggy draft gets debugged, an improvement is scored, a bad
submission becomes a buggy node with an exact message, and the Parquet rows match the Journal.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

from engine.records.store import RunStore
from engine.run import main
from search.journal import Journal
from tests.helpers import SCRIPT, make_data

# The searches whose checks are about selection score their nodes on two folds, not five: a
# written node runs once per fold (the module's shared run keeps five, and checks them).
TWO_FOLDS = ("--folds", "2")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("loop")
    make_data(tmp / "train.csv")
    shutil.copy(SCRIPT, tmp / "replies.json")
    (tmp / "task.yaml").write_text(
        "data: train.csv\ntarget: y\nllm: scripted:replies.json\nnum_drafts: 2\n"
        "debug_prob: 1.0\nmax_nodes: 6\nexecutors: 1\nbudget: 5m\nquiet: true\n"
        "exec_timeout: 120\nbaseline: false\nfloor: false\nensemble: false\n"
        # Saving the answer's model (5 more sandbox runs, one a fold) is not what these
        # tests check: test_fitted and test_bundle check saved fold models.
        "save_model: false\n"
    )
    assert main(["--task", str(tmp / "task.yaml"), "--out", str(tmp / "runs")]) == 0
    (run,) = [p for p in (tmp / "runs").iterdir() if not p.name.startswith(".")]
    return run


def test_nodes_and_statuses(run_dir: Path) -> None:
    rows = pd.read_parquet(run_dir / "nodes")
    assert len(rows) == 6
    by_id = rows.set_index("node_id")
    debugs = rows[rows.operator == "debug"]
    fixed = debugs[(debugs.status == "ok")]
    assert len(fixed) >= 1
    assert (by_id.loc[fixed.parent_id, "status"] == "buggy").all()
    assert "KeyError" in by_id.loc[fixed.parent_id.iloc[0], "error"]
    bad_rows = rows[rows.error.str.contains("rows; expected", na=False)]
    assert len(bad_rows) >= 1 and (bad_rows.status == "buggy").all()
    ok = rows[rows.status == "ok"]
    assert ok.metric_raw.notna().all() and ok.test_metric_raw.notna().all()
    assert (ok.metric == -ok.metric_raw).all()  # rmse: normalised so higher is better
    assert rows[rows.status != "ok"].metric.isna().all()
    assert (rows.prompt_tokens > 0).all()


def test_improve_beats_its_parent(run_dir: Path) -> None:
    rows = pd.read_parquet(run_dir / "nodes").set_index("node_id")
    improves = rows[(rows.operator == "improve") & (rows.status == "ok")]
    assert len(improves) >= 1
    # y depends on a**2: the squared feature must beat the plain linear draft.
    linear = rows[(rows.operator == "draft") & (rows.status == "ok")].metric_raw.min()
    assert improves.metric_raw.min() < linear


def test_parquet_matches_journal_and_best(run_dir: Path) -> None:
    store = RunStore.open(run_dir)
    nodes, tests = store.read_nodes()
    journal = Journal(nodes)
    assert len({n.node_id for n in nodes}) == len(nodes) == 6
    table = ds.dataset(str(run_dir / "nodes"), format="parquet").to_table()
    assert table.num_rows == 6
    best = journal.best()
    assert best is not None
    assert (run_dir / "best" / "solution.py").read_text() == best.code
    valid = pd.read_csv(run_dir / "best" / "submission" / "valid.csv")
    folds = store.load_folds()  # 5 folds of train+valid: out-of-fold predictions of every row
    assert folds is not None and folds.k == 5
    assert len(valid) == len(folds.held_out) == len(pd.read_csv(run_dir / "task" / "train.csv")) \
        + len(pd.read_csv(run_dir / "task" / "valid.csv"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["result"]["best_node"] == best.node_id
    assert manifest["result"]["best_test"] == tests[best.node_id]
    assert manifest["spent"]["nodes"] == 6
    summary = (run_dir / "summary.md").read_text()
    assert f"{best.metric_raw:.5g}" in summary and "Best path" in summary


def test_hidden_labels_never_reach_the_candidate(run_dir: Path) -> None:
    task = RunStore.open(run_dir).load_task()
    inputs = task.inputs()
    for name in ("valid.csv", "test.csv"):
        header = inputs[name].decode().splitlines()[0].split(",")
        assert "y" not in header


@pytest.mark.slow  # whole searches, over 20 s: the slow step
@pytest.mark.parametrize("metric", ["roc_auc", "f1"])
def test_baseline_root_on_a_classification_task(tmp_path: Path, metric: str) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 300))
    frame = pd.DataFrame({"a": a, "b": b, "colour": rng.choice(["red", "blue", None], 300),
                          "label": np.where(a + 0.5 * b > 0, "yes", "no")})
    frame.to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "runs"
    argv = ["--data", str(tmp_path / "d.csv"), "--target", "label", "--metric", metric,
            "--llm", f"scripted:{SCRIPT}", "--max-nodes", "1", "--out", str(out), "--quiet",
            "--folds", "1"]  # the baseline's code and labels: the holdout shows them
    assert main(argv) == 0
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    rows = pd.read_parquet(run / "nodes")
    (root,) = rows.itertuples()
    assert root.operator == "baseline" and root.status == "ok", root.error
    assert pd.isna(root.parent_id) and root.prompt_tokens == 0
    assert root.metric_raw > 0.85  # a separable problem: LightGBM must do well
    assert "LGBMClassifier" in root.code and "def prepare" in root.code
    valid = pd.read_csv(run / "best" / "submission" / "valid.csv")
    assert set(valid.prediction) <= {"yes", "no"}
    if metric == "roc_auc":
        assert {"proba_no", "proba_yes"} <= set(valid.columns)


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_select_cv_reranks_the_top_nodes(tmp_path: Path) -> None:
    make_data(tmp_path / "train.csv")
    out = tmp_path / "runs"
    argv = ["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm", f"scripted:{SCRIPT}",
            "--max-nodes", "6", "--executors", "1", "--select", "cv", "--out", str(out),
            "--quiet", *TWO_FOLDS]
    assert main(argv) == 0
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    selection = json.loads((run / "manifest.json").read_text())["selection"]
    candidates = selection["candidates"]
    assert 2 <= len(candidates) <= 3
    ran = [c for c in candidates if not c["error"]]
    assert ran and all(len(c["fold_scores"]) == 5 for c in ran)
    assert all(c["cv_mean"] >= 0 for c in ran)  # rmse of each fold, on train+valid only
    winner = selection["winner"]
    best_cv = min(ran, key=lambda c: c["cv_mean"])
    assert winner == best_cv["node_id"]
    rows = pd.read_parquet(run / "nodes").set_index("node_id")
    assert (run / "best" / "solution.py").read_text() == rows.loc[winner, "code"]
    assert "- rule: `--select cv` (5-fold cv on train+valid)" in (run / "summary.md").read_text()


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_default_selection_confirms_against_the_baseline(tmp_path: Path) -> None:
    make_data(tmp_path / "train.csv")
    out = tmp_path / "runs"
    argv = ["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm", f"scripted:{SCRIPT}",
            "--max-nodes", "6", "--executors", "1", "--out", str(out), "--quiet", *TWO_FOLDS]
    assert main(argv) == 0
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    manifest = json.loads((run / "manifest.json").read_text())
    selection = manifest["selection"]
    assert selection["method"].startswith("confirmed")
    rows = pd.read_parquet(run / "nodes").set_index("node_id")
    ok = rows[rows.status == "ok"]
    # Every scored node keeps its submissions; nothing else does.
    assert sorted(p.name for p in (run / "preds").iterdir()) == sorted(ok.index)
    baseline = ok[ok.operator == "baseline"].index[0]
    above = ok[ok.metric > ok.loc[baseline, "metric"]]
    assert {c["node_id"] for c in selection["candidates"]} <= set(above.index)
    confirmed = [c["node_id"] for c in selection["candidates"] if c["p_beats_baseline"] >= 0.9]
    assert selection["winner"] in (confirmed or [baseline])
    winner = selection["winner"]
    assert (run / "best" / "solution.py").read_text() == rows.loc[winner, "code"]
    assert manifest["result"]["best_node"] == winner
    assert (pd.read_csv(run / "best" / "submission" / "valid.csv").prediction.to_numpy()
            == pytest.approx(pd.read_csv(io.BytesIO(RunStore.open(run).read_predictions(
                winner, "valid") or b"")).prediction.to_numpy()))


def test_a_holdout_answer_is_refitted_on_train_and_valid(tmp_path: Path) -> None:
    """Scored on the holdout, the answer learned from train alone: best/ ships it refitted on
    every train + valid row, and the summary's test score is that refit's."""
    make_data(tmp_path / "train.csv")
    out = tmp_path / "runs"
    assert main(["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm",
                 f"scripted:{SCRIPT}", "--max-nodes", "1", "--folds", "1", "--out", str(out),
                 "--quiet"]) == 0
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    manifest = json.loads((run / "manifest.json").read_text())
    refit = manifest["selection"]["refit"]
    rows = pd.read_parquet(run / "nodes")
    (root,) = rows.itertuples()
    assert root.operator == "baseline" and refit["test_raw"] != root.test_metric_raw
    task = RunStore.open(run).load_task()
    from engine.evaluation.scoring import score

    shipped = (run / "best" / "submission" / "test.csv").read_bytes()
    assert score(task, shipped, "test") == pytest.approx(refit["test_raw"])
    assert manifest["result"]["best_test"] == pytest.approx(refit["test_raw"])
    assert "refitted on train + valid" in (run / "summary.md").read_text()
    # The refit and the save were kept time for out of the budget, and what they took is told.
    spent = manifest["spent"]
    assert spent["reserved_seconds"] > 0 and 0 < spent["closing_seconds"] < spent["seconds"]
    assert "selecting and saving the answer took" in (run / "summary.md").read_text()
    # The saved model is that refit: one model, fitted on every train + valid row.
    model = manifest["selection"]["model"]
    assert model["saved"] is True and model["models"] == 1
    assert model["training"] == "every train + valid row"
    assert (run / "best" / "model" / "fold-0.pkl").is_file()
    assert "with the answer's saved model in `best/model/`" in (run / "summary.md").read_text()
    # Same training rows, a deterministic model: the saved model predicts what --refit trains.
    from engine.predict import main as predict_main

    task.test_X.to_csv(tmp_path / "rows.csv", index=False)
    saved, refit_out = tmp_path / "saved.csv", tmp_path / "refit.csv"
    assert predict_main([str(run), str(tmp_path / "rows.csv"), "-o", str(saved)]) == 0
    assert predict_main([str(run), str(tmp_path / "rows.csv"), "-o", str(refit_out),
                         "--refit"]) == 0
    assert np.allclose(pd.read_csv(saved).prediction, pd.read_csv(refit_out).prediction,
                       rtol=1e-9, atol=1e-12)
    assert np.allclose(pd.read_csv(saved).prediction,
                       pd.read_csv(io.BytesIO(shipped)).prediction, rtol=1e-9, atol=1e-12)


def test_no_save_model_keeps_no_model(tmp_path: Path) -> None:
    make_data(tmp_path / "train.csv")
    out = tmp_path / "runs"
    assert main(["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm",
                 f"scripted:{SCRIPT}", "--max-nodes", "1", "--folds", "1", "--out", str(out),
                 "--quiet", "--no-save-model"]) == 0
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    manifest = json.loads((run / "manifest.json").read_text())
    assert "model" not in manifest["selection"] and "test_raw" in manifest["selection"]["refit"]
    assert not (run / "best" / "model").exists()
    assert "it trains the answer again" in (run / "summary.md").read_text()
