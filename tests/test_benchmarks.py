"""The benchmark runner, baselines and report: arithmetic on hand-made numbers, then the smoke
suite end to end (real engine runs with the scripted LLM, real baselines, the report)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import report
from benchmarks.baselines import prepare_features
from benchmarks.datasets import REGISTRY
from benchmarks.run import COLUMNS, Job, check_engine_args, plan_jobs, save_results
from benchmarks.run import main as run_main
from engine.run import main as engine_main
from engine.store import RunStore
from engine.task import TaskSpec, prepare_task
from search.errors import UserError
from search.metric import normalised_score
from search.node import Operator
from search.policy import Proposal
from search.sela import STAGE_NAMES

SCRIPT = Path(__file__).parent / "data" / "scripted_generic.json"


# ---- arithmetic ------------------------------------------------------------------------------


def test_normalised_score() -> None:
    assert normalised_score(0.8, maximize=True) == 0.8
    assert normalised_score(3.0, maximize=False) == 0.25  # 1 / (1 + 3)
    assert normalised_score(-0.2, maximize=True) == 0.0  # a negative R² counts as nothing
    assert normalised_score(500.0, maximize=False) == pytest.approx(0.001996, abs=1e-6)


def test_relative_to_lightgbm() -> None:
    assert report.relative_to(0.84, 0.80, maximize=True) == pytest.approx(0.05)
    assert report.relative_to(9.0, 10.0, maximize=False) == pytest.approx(0.10)
    assert report.relative_to(11.0, 10.0, maximize=False) == pytest.approx(-0.10)
    assert report.relative_to(1.0, 0.0, maximize=True) is None


MEANS = {
    "f1-task": {"greedy": 0.90, "mcts": 0.80, "sela": 0.85, "lgbm": 0.80},
    "rmse-task": {"greedy": 5.0, "mcts": 4.0, "sela": 4.0, "lgbm": 6.0},
    "f1-task-2": {"greedy": 0.70, "mcts": 0.70, "sela": 0.60},  # no lgbm score here
}
MAXIMIZE = {"f1-task": True, "rmse-task": False, "f1-task-2": True}


def test_average_ranks_by_hand() -> None:
    # f1-task:   greedy .90 -> 1, sela .85 -> 2, mcts and lgbm .80 tie for 3 and 4 -> 3.5 each
    # rmse-task: mcts and sela 4.0 tie for 1 and 2 -> 1.5 each, greedy 5.0 -> 3, lgbm 6.0 -> 4
    # f1-task-2: greedy and mcts .70 tie -> 1.5 each, sela .60 -> 3, lgbm has no score
    ranks = report.average_ranks(MEANS, MAXIMIZE)
    assert {m: r for m, (r, _) in ranks.items()} == pytest.approx(
        {"greedy": (1 + 3 + 1.5) / 3, "mcts": (3.5 + 1.5 + 1.5) / 3,
         "sela": (2 + 1.5 + 3) / 3, "lgbm": (3.5 + 4) / 2})
    assert {m: n for m, (_, n) in ranks.items()} == {"greedy": 3, "mcts": 3, "sela": 3,
                                                     "lgbm": 2}
    # Float noise is no difference: 0.1 + 0.2 and 0.3 share a rank.
    noisy = report.average_ranks({"t": {"a": 0.1 + 0.2, "b": 0.3, "c": 0.1}}, {"t": True})
    assert noisy == {"a": (1.5, 1), "b": (1.5, 1), "c": (3.0, 1)}


def test_wins_ties_losses_against_sela_by_hand() -> None:
    table = report.wins_ties_losses(MEANS, MAXIMIZE)
    assert "sela" not in table
    assert table["greedy"] == (2, 0, 1)  # better on both f1 tasks, worse RMSE
    assert table["mcts"] == (1, 1, 1)  # worse, tie (4.0 = 4.0), better
    assert table["lgbm"] == (0, 0, 2)  # f1-task-2 has no lgbm score: not counted
    assert report.same(0.1 + 0.2, 0.3) and not report.same(0.3, 0.3001)


def test_mean_and_sd() -> None:
    assert report.mean([4.0, 6.0]) == 5.0
    assert report.sd([4.0, 6.0]) == pytest.approx(math.sqrt(2))
    assert report.sd([3.0]) == 0.0


def test_best_so_far() -> None:
    points = [(3.0, 5.0), (1.0, 6.0), (2.0, 7.0), (4.0, 4.5)]
    assert report.best_so_far(points, maximize=False) == [(1.0, 6.0), (2.0, 6.0), (3.0, 5.0),
                                                           (4.0, 4.5)]
    assert report.best_so_far(points, maximize=True) == [(1.0, 6.0), (2.0, 7.0), (3.0, 7.0),
                                                          (4.0, 7.0)]


def test_report_tables_from_hand_made_rows(tmp_path: Path) -> None:
    rows = []
    for seed, (g, s, lg) in enumerate([(4.0, 5.0, 6.0), (6.0, 5.0, 6.0)]):
        for method, kind, test in (("greedy", "policy", g), ("sela", "policy", s),
                                   ("lgbm", "baseline", lg)):
            rows.append({"task": "t", "task_type": "regression", "metric": "rmse",
                         "method": method, "kind": kind, "seed": seed, "status": "ok",
                         "error": "", "valid": test, "test": test, "nodes": 3, "ok_nodes": 2,
                         "prompt_tokens": 10, "completion_tokens": 5, "seconds": 9.0,
                         "budget": 60.0, "best_operator": "draft",
                         "run_dir": str(tmp_path / "gone"), "started_at": 0.0})
    rows.append({**rows[0], "method": "mcts", "status": "failed", "test": None,
                 "error": "RuntimeError: engine.run exited 1"})
    save_results(tmp_path / "results.parquet", pd.DataFrame(rows))
    out = report.write_report(tmp_path / "results.parquet", tmp_path / "report.md")
    text = out.read_text()
    # greedy: mean 5, sd sqrt(2); NS mean of 1/5 and 1/7; 1/6 for sela (5 both seeds)
    assert "| t | rmse (lower is better) | 5 ± 1.4 (2) | 5 ± 0 (2) | 6 ± 0 (2) |" in text
    assert f"| t | {(1 / 5 + 1 / 7) / 2:.4g} | {1 / 6:.4g} | {1 / 7:.4g} |" in text
    assert "| t | +16.7 % | +16.7 % | +0.0 % |" in text  # (6 - 5) / 6
    assert "| greedy | 0 | 1 | 0 |" in text and "| lgbm | 0 | 0 | 1 |" in text
    assert "RuntimeError: engine.run exited 1" in text
    assert (tmp_path / "report-curves.png").stat().st_size > 0
    assert (tmp_path / "report-relative.png").stat().st_size > 0


# ---- runner pieces ---------------------------------------------------------------------------


def test_plan_is_seed_major_with_baselines_first() -> None:
    jobs = plan_jobs([REGISTRY["penguins"], REGISTRY["kc1"]], ["greedy"], ["lgbm"], 2)
    assert [j.key for j in jobs[:4]] == [("penguins", "lgbm", 0), ("penguins", "greedy", 0),
                                         ("kc1", "lgbm", 0), ("kc1", "greedy", 0)]
    assert len(jobs) == 8 and Job("kc1", "greedy", "policy", 1).key in [j.key for j in jobs]


@pytest.mark.parametrize("argv, message", [
    (["--policies", "greedy,nope"], "unknown policy nope"),
    (["--baselines", "xgb"], "unknown baseline xgb"),
    (["--seeds", "0"], "bad --seeds"),
    (["--suite", "nope"], "unknown suite"),
    (["--budget", "soon"], "bad budget"),
    (["--seed", "3"], "--seed is set by the runner"),
    (["--max-nodez", "3"], "bad engine flags"),
])
def test_bad_runner_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "results.parquet").exists()


def test_engine_flags_pass_through_when_valid() -> None:
    check_engine_args(["--max-nodes", "3", "--select", "cv"])
    with pytest.raises(UserError):
        check_engine_args(["--out=elsewhere"])


def test_baselines_see_the_harness_features() -> None:
    dataset = REGISTRY["penguins"]  # text columns and missing values
    task = prepare_task(TaskSpec(dataset.path, dataset.target), seed=0)
    X, X_valid, X_test = prepare_features(task)
    assert list(X.columns) == list(X_valid.columns) == list(X_test.columns)
    assert len(X) == len(task.train) and len(X_test) == len(task.test_X)
    assert not X.isna().any().any() and all(t.kind in "fiu" for t in X.dtypes)
    assert any(c.startswith("island_") for c in X.columns)  # one-hot, as prepare() does


# ---- the smoke suite end to end --------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    argv = ["--suite", "smoke", "--policies", "greedy,sela", "--baselines", "lgbm,optuna",
            "--seeds", "1", "--budget", "90s", "--baseline-budget", "2s", "--split-seed", "7",
            "--llm", f"scripted:{SCRIPT}", "--out", str(out), "--max-nodes", "4",
            # The holdout and no engine work: the baseline root is then the lgbm baseline.
            "--folds", "1", "--no-floor", "--no-ensemble"]
    assert run_main(argv) == 0
    return out


def test_smoke_rows_and_run_directories(smoke: Path) -> None:
    rows = pd.read_parquet(smoke / "results.parquet")
    assert list(rows.columns) == list(COLUMNS)
    assert sorted(zip(rows.task, rows.method, strict=True)) == sorted(
        (t, m) for t in ("penguins", "concrete-strength")
        for m in ("greedy", "sela", "lgbm", "optuna"))
    assert (rows.status == "ok").all() and rows.test.notna().all() and rows.valid.notna().all()
    assert (rows.seed == 0).all() and (rows.split_seed == 7).all()
    for task, part in rows.groupby("task"):
        # Searches ran with --seed 0 --split-seed 7, baselines split with seed 7 themselves.
        assert part.data_hash.nunique() == 1, f"{task}: methods saw different splits"
    searches = rows[rows.kind == "policy"]
    assert (searches.nodes == 4).all() and (searches.prompt_tokens > 0).all()
    for row in searches.itertuples():
        run = RunStore.open(Path(row.run_dir))
        assert Path(row.run_dir).parent == smoke / "runs" / row.task / row.method / "seed0"
        assert run.manifest()["config"]["policy"] == row.method
        nodes = pd.DataFrame(run.read_rows())
        # The engine's baseline root is LightGBM with defaults, like the lgbm baseline, on the
        # same split: the same test score, computed twice by different code paths.
        lgbm = rows[(rows.task == row.task) & (rows.method == "lgbm")].test.iloc[0]
        assert nodes[nodes.operator == "baseline"].test_metric_raw.iloc[0] == pytest.approx(lgbm)
    sela = pd.DataFrame(RunStore.open(Path(
        searches[searches.method == "sela"].run_dir.iloc[0])).read_rows())
    assert {"insights", "sela"} <= set(sela.operator)
    for row in rows[rows.kind == "baseline"].itertuples():
        result = json.loads((Path(row.run_dir) / "result.json").read_text())
        assert result["test"] == row.test and result["data_hash"] == row.data_hash
        assert result["fits"] == row.nodes == len(result["curve"]) >= 1
    for task, part in rows[rows.kind == "baseline"].groupby("task"):
        valid = part.set_index("method").valid
        # Optuna's first trial is exactly LightGBM's defaults: tuning can only match or beat it.
        if part.metric.iloc[0] == "rmse":
            assert valid["optuna"] <= valid["lgbm"], task
        else:
            assert valid["optuna"] >= valid["lgbm"], task


def test_smoke_rerun_skips_done_rows_and_measures_finished_runs(smoke: Path) -> None:
    path = smoke / "results.parquet"
    before = pd.read_parquet(path)
    dirs = sorted(p for p in (smoke / "runs").rglob("manifest.json"))
    # A row lost after its run finished: the rerun measures the run instead of searching again.
    dropped = before[(before.method == "sela") & (before.task == "penguins")]
    save_results(path, before.drop(index=dropped.index))
    argv = ["--suite", "smoke", "--policies", "greedy,sela", "--baselines", "lgbm,optuna",
            "--seeds", "1", "--budget", "90s", "--split-seed", "7", "--llm", f"scripted:{SCRIPT}",
            "--out", str(smoke)]
    assert run_main(argv) == 0
    after = pd.read_parquet(path)
    assert sorted(p for p in (smoke / "runs").rglob("manifest.json")) == dirs
    assert len(after) == len(before)
    restored = after[(after.method == "sela") & (after.task == "penguins")].iloc[0]
    assert restored.run_dir == dropped.run_dir.iloc[0] and restored.test == dropped.test.iloc[0]


def test_smoke_report(smoke: Path) -> None:
    out = report.write_report(smoke / "results.parquet", smoke / "report.md")
    text = out.read_text()
    for heading in ("Test score per task", "SELA normalised score", "relative to LightGBM",
                    "Average rank", "Wins / ties / losses against sela", "Runs"):
        assert heading in text
    assert "| task | metric | greedy | sela | lgbm | optuna |" in text
    assert text.count("| penguins |") >= 4 and "| concrete-strength |" in text
    assert (smoke / "report-curves.png").stat().st_size > 5000
    print(text)


def test_smoke_sela_run_resumes_its_tree(smoke: Path, tmp_path: Path) -> None:
    """A copy of the smoke suite's sela run, resumed: the pools written before are kept (no new
    insights request), rollouts go down the stages, a failed rollout is debugged."""
    (run,) = (smoke / "runs" / "penguins" / "sela" / "seed0").iterdir()
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    assert engine_main(["--resume", str(copy), "--split-seed", "1"]) == 2  # the split is fixed
    assert engine_main(["--resume", str(copy), "--max-nodes", "11", "--quiet"]) == 0
    rows = pd.DataFrame(RunStore.open(copy).read_rows())
    assert len(rows) == 11 and (rows.policy == "sela").all()
    insights = rows[rows.operator == "insights"]
    assert sorted(insights.hint) == sorted(STAGE_NAMES) and (insights.status == "ok").all()
    assert insights.plan.map(lambda p: p.startswith("[")).all()
    rollouts = rows[rows.operator == "sela"]
    depths = [len(Proposal.from_hint(Operator.SELA, None, 0.0, h).path) for h in rollouts.hint]
    assert depths[0] == 0 and max(depths) >= 2  # the root first, then down the stages
    debug = rows[rows.operator == "debug"]
    assert len(debug) >= 1 and set(debug.parent_id) <= set(rollouts.node_id)
    assert len(RunStore.open(copy).manifest()["starts"]) == 2
