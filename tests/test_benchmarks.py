"""The benchmark runner, baselines and report: arithmetic on hand-made numbers, then the smoke
suite end to end (real engine runs with the scripted LLM, real baselines, the report)."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import gain, report, stats
from benchmarks.baselines import (
    BASELINES,
    PEER_METRICS,
    cv_score,
    learning_rows,
    lightgbm,
    prepare_features,
    submission_csv,
)
from benchmarks.datasets import PROTOCOLS, REGISTRY
from benchmarks.run import (
    FLOOR,
    Job,
    Settings,
    check_engine_args,
    engine_argv,
    fold_files,
    outer_folds,
    plan_jobs,
)
from benchmarks.run import main as run_main
from benchmarks.table import COLUMNS, save_results
from common.errors import UserError
from common.metric import normalised_score
from engine.evaluation.scoring import score
from engine.records.store import RunStore
from engine.run import main as engine_main
from engine.task.prepare import TaskSpec, prepare_task
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
    assert stats.same(0.1 + 0.2, 0.3) and not stats.same(0.3, 0.3001)


def test_mean_and_sd() -> None:
    assert stats.mean([4.0, 6.0]) == 5.0
    assert stats.sd([4.0, 6.0]) == pytest.approx(math.sqrt(2))
    assert stats.sd([3.0]) == 0.0


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


def _gain_rows(tmp_path: Path) -> list[dict[str, object]]:
    """Two tasks, two outer folds, two seeds; greedy with the LLM and the floor arm."""
    rows = []
    # rmse (lower is better): greedy better by 1 on both folds; f1: worse on one fold, better
    # on the other, so the mean difference is within the folds' spread.
    scores = {("reg", "greedy"): (4.0, 5.0), ("reg", FLOOR): (5.0, 6.0),
              ("cls", "greedy"): (0.70, 0.90), ("cls", FLOOR): (0.80, 0.78)}
    for (task, method), per_fold in scores.items():
        for fold, test in enumerate(per_fold):
            for seed in (0, 1):
                greedy = method == "greedy"
                rows.append({"task": task, "task_type": "regression",
                             "metric": "rmse" if task == "reg" else "f1", "method": method,
                             "kind": "policy", "seed": seed, "fold": fold, "outer_folds": 2,
                             "status": "ok", "error": "", "valid": test,
                             "test": test + (0.01 if seed else -0.01), "nodes": 3,
                             "ok_nodes": 2, "prompt_tokens": 10, "completion_tokens": 5,
                             "seconds": 9.0, "budget": 60.0, "best_operator": "tune",
                             "run_dir": str(tmp_path / "gone"), "started_at": 0.0,
                             "programs_proposed": 3 if greedy else 0,
                             "programs_rejected": 1 if greedy else 0,
                             "programs_failed": 0, "programs_scored": 2 if greedy else 0,
                             "programs_kept": 1 if greedy and fold == 0 else 0,
                             "program_llm_seconds": 4.0 + seed if greedy else None,
                             "answer_uses_program": greedy and fold == 0 and seed == 0,
                             "answer_unkept_share": 0.1 * (fold + seed) if greedy else None,
                             "llm_retired_seconds": 100.0 + 50 * seed
                             if greedy and fold == 0 else None,
                             "llm_retired_why": "10 feature programs in a row were not kept"
                             if greedy and fold == 0 else "",
                             "exec_seconds": 100.0,
                             "program_exec_seconds": 25.0 if greedy else 0.0})
    return rows


def test_llm_gain_pairs_the_floor_arm_by_outer_fold(tmp_path: Path) -> None:
    frame = pd.DataFrame(_gain_rows(tmp_path))
    gains = {g.task: g for g in gain.llm_gains(frame, {"reg": False, "cls": True})}
    reg, cls = gains["reg"], gains["cls"]
    assert (reg.with_llm, reg.without) == (pytest.approx(4.5), pytest.approx(5.5))
    assert reg.differences == (pytest.approx(1.0), pytest.approx(1.0))  # lower rmse: a gain
    assert reg.verdict == "won" and reg.intervals == (None, None)
    assert cls.differences == (pytest.approx(-0.1), pytest.approx(0.12))
    assert cls.mean == pytest.approx(0.01) and cls.verdict == "tied"
    # Each fold's two floor seeds test 0.02 apart: an sd of 0.0141 on both folds.
    assert reg.floor_spread == pytest.approx(0.02 / 2 ** 0.5)
    one_seed = frame[(frame.seed == 0) | ((frame.method == FLOOR) & (frame.fold == 1))]
    # Fold 0 has one floor seed and fold 1 two: fold 1's sd alone.
    assert gain.llm_gains(one_seed, {"reg": False, "cls": True})[0].floor_spread \
        == pytest.approx(0.02 / 2 ** 0.5)
    assert gain.llm_gains(frame[frame.seed == 0], {"reg": False, "cls": True})[0] \
        .floor_spread is None
    lost = gain.Gain("t", "greedy", 0.5, 0.6, (-0.1, -0.12))
    assert lost.verdict == "lost"
    assert gain.Gain("t", "greedy", 0.5, 0.5, (0.0,)).verdict == "tied"


def test_one_fold_is_decided_by_the_interval_over_its_test_rows() -> None:
    def one(interval: tuple[float, float] | None) -> str:
        return gain.Gain("t", "greedy", 4.0, 4.2, (0.2,), (interval,)).verdict

    assert one((0.05, 0.3)) == "won" and one((-0.3, -0.01)) == "lost"
    assert one((-0.1, 0.4)) == "tied"
    assert one(None) == "one fold"  # no spread at all: no verdict
    # With several folds their spread decides, whatever the intervals say.
    assert gain.Gain("t", "greedy", 4.0, 4.2, (0.2, 0.3), ((-1.0, 1.0), None)).verdict == "won"


def test_each_folds_interval_compares_the_floor_run_with_the_llm_run_of_one_seed(
        tmp_path: Path) -> None:
    rows = [r for r in _gain_rows(tmp_path) if not (r["method"] == FLOOR and r["seed"] == 0)]
    for row in rows:
        row["run_dir"] = f"{row['task']}/{row['method']}/{row['fold']}/{row['seed']}"
    asked: list[tuple[str, str]] = []

    def interval(floor_run: str, llm_run: str) -> tuple[float, float]:
        asked.append((floor_run, llm_run))
        return (0.5, 1.5) if floor_run.startswith("reg") else (-0.2, 0.1)

    gains = {g.task: g for g in gain.llm_gains(pd.DataFrame(rows), {"reg": False, "cls": True},
                                                interval)}
    assert gains["reg"].intervals == ((0.5, 1.5), (0.5, 1.5))
    # The floor arm ran seed 1 alone: the pair is seed 1 of both arms.
    assert ("reg/floor/0/1", "reg/greedy/0/1") in asked and len(asked) == 4
    assert all(f.endswith("/1") and g.endswith("/1") for f, g in asked)
    assert gain.run_interval(str(tmp_path / "gone"), str(tmp_path)) is None


def test_report_shows_the_llm_gain_table(tmp_path: Path) -> None:
    save_results(tmp_path / "results.parquet", pd.DataFrame(_gain_rows(tmp_path)))
    text = report.write_report(tmp_path / "results.parquet", tmp_path / "report.md").read_text()
    assert "## LLM gain: the same search with and without the LLM" in text
    # reg: 4 runs of greedy, each 3 proposed / 1 refused / 0 failed / 2 scored, kept on fold 0;
    # median of the runs' medians 4 and 5; the answer used a kept program in 1 run, and
    # gave programs not kept 0, 10, 10 and 20 % of its weight; the LLM was asked for no more
    # on fold 0, at 100 and 150 s.
    assert ("| reg | rmse | greedy | 4.5 | 5.5 | +1 ± 0 (2) | n/a; n/a | won | 12 / 4 / 0 / 8 / 2 "
            "| 4.5 | 1 of 4 | 10% (4) | 2 of 4 (median 125 s) |"
            ) in text  # the run folders are gone: no interval
    assert "| cls | f1 | greedy | 0.8 | 0.79 | +0.01 ± 0.16 (2) | n/a; n/a | tied |" in text
    assert "- with the LLM, greedy won on 1 of 2 tasks, lost on 0 and tied on 1" in text
    # each LLM run beside the floor run of its fold and seed
    assert ("| reg | 0 | greedy | 0 | 4.99 | 3.99 | +1 | 3 / 3 | 3 / 1 / 0 / 2 / 1 | 25% | yes | "
            "100 (10 feature programs in a row were not kept) | 4.0 | n/a / n/a |") in text
    assert ("| cls | 1 | greedy | 1 | 0.79 | 0.91 | +0.12 | 3 / 3 | 3 / 1 / 0 / 2 / 0 | 25% | "
            "no | never | 5.0 |") in text
    one_fold = [r for r in _gain_rows(tmp_path) if r["fold"] == 0 and r["task"] == "reg"]
    save_results(tmp_path / "one.parquet", pd.DataFrame(one_fold))
    text = report.write_report(tmp_path / "one.parquet", tmp_path / "one.md").read_text()
    assert "| +1 ± 0 (1) | n/a | one fold |" in text
    assert "tied on 0 within the folds' spread (one fold: the interval over its test rows); on " \
        "1 one fold and no interval tell nothing." in text


def test_the_report_says_when_paired_runs_started_far_apart(tmp_path: Path) -> None:
    rows = _gain_rows(tmp_path)
    for row in rows:  # cls's floor arm ran two days after its LLM arm, fold 1 seed 1 alone
        if row["task"] == "cls" and row["method"] == FLOOR:
            row["started_at"] = 48 * 3600.0 if (row["fold"], row["seed"]) == (1, 1) else 600.0
    gains = {g.task: g for g in gain.llm_gains(pd.DataFrame(rows), {"reg": False, "cls": True})}
    assert gains["reg"].hours_apart == 0.0
    assert gains["cls"].hours_apart == pytest.approx(48.0)
    save_results(tmp_path / "results.parquet", pd.DataFrame(rows))
    text = report.write_report(tmp_path / "results.parquet", tmp_path / "report.md").read_text()
    assert "| 4.5 | 1 of 4 | 10% (4) | 2 of 4 (median 125 s) | 0.0 | 0.014 |" in text
    assert "| 48.0 |" in text
    # Rows from before the columns existed (read back empty) are not counted as served to the
    # end: only the runs whose row says are.
    for row in rows:
        if row["fold"] == 1:
            row["llm_retired_why"] = None
    save_results(tmp_path / "results.parquet", pd.DataFrame(rows))
    text = report.write_report(tmp_path / "results.parquet", tmp_path / "report.md").read_text()
    assert "| 10% (4) | 2 of 2 (median 125 s) |" in text
    assert "- **Paired runs started up to 48 hours apart** (cls): " in text
    rows[0]["started_at"] = None  # a row written before the column existed: unknown
    assert gain.llm_gains(pd.DataFrame(rows), {"reg": False, "cls": True})[0].hours_apart is None
    save_results(tmp_path / "results.parquet", pd.DataFrame(_gain_rows(tmp_path)))
    text = report.write_report(tmp_path / "results.parquet", tmp_path / "report.md").read_text()
    assert "hours apart" not in text


def test_no_floor_arm_no_gain_table(tmp_path: Path) -> None:
    rows = [r for r in _gain_rows(tmp_path) if r["method"] != FLOOR]
    save_results(tmp_path / "results.parquet", pd.DataFrame(rows))
    text = report.write_report(tmp_path / "results.parquet", tmp_path / "report.md").read_text()
    assert "LLM gain" not in text


# ---- runner pieces ---------------------------------------------------------------------------


def test_plan_is_seed_major_then_fold_major_with_baselines_first() -> None:
    jobs = plan_jobs([REGISTRY["penguins"], REGISTRY["kc1"]], ["greedy"], ["lgbm"], 2)
    assert [j.key for j in jobs[:4]] == [("penguins", "lgbm", 0, 0), ("penguins", "greedy", 0, 0),
                                         ("kc1", "lgbm", 0, 0), ("kc1", "greedy", 0, 0)]
    assert len(jobs) == 8 and Job("kc1", "greedy", "policy", 1).key in [j.key for j in jobs]
    folded = plan_jobs([REGISTRY["penguins"]], ["greedy"], ["lgbm"], 2, folds=3)
    assert len(folded) == 12 and [j.fold for j in folded[:6]] == [0, 0, 1, 1, 2, 2]
    assert {j.seed for j in folded[:6]} == {0}


def test_the_floor_arm_runs_beside_the_searches_without_an_llm() -> None:
    jobs = plan_jobs([REGISTRY["penguins"]], ["greedy", "mcts"], ["lgbm"], 1, floor_arm=True)
    assert [j.method for j in jobs] == ["lgbm", "greedy", "mcts", FLOOR]
    assert FLOOR not in [j.method for j in plan_jobs([REGISTRY["penguins"]], ["greedy"], [], 1)]
    dataset = REGISTRY["penguins"]
    floor = engine_argv(jobs[-1], dataset, _settings(executors=2), Path("out"), dataset.path,
                        None)
    search = engine_argv(jobs[1], dataset, _settings(executors=2), Path("out"), dataset.path,
                         None)
    assert floor[floor.index("--llm") + 1] == "none" and "--policy" not in floor
    assert search[search.index("--llm") + 1] == "llama"
    # The core the LLM actor holds in the search is one more executor of the floor arm.
    assert (floor[floor.index("--executors") + 1], search[search.index("--executors") + 1]) == (
        "3", "2")
    with pytest.raises(UserError, match=r"the floor arm .*leaves nothing to run"):
        check_engine_args(["--no-floor", "--no-baseline"], floor_arm=True)
    check_engine_args(["--no-floor", "--no-baseline"])  # with an LLM, drafts run


def test_outer_folds_cover_every_row_once_and_stratify() -> None:
    target = ["a"] * 30 + ["b"] * 10 + ["c"] * 5
    folds = outer_folds(target, task_type="multiclass", folds=5, seed=3)
    assert sorted(i for f in folds for i in f.tolist()) == list(range(45))
    for fold in folds:  # each test part holds the classes in the data's proportions
        labels = [target[i] for i in fold]
        assert (labels.count("a"), labels.count("b"), labels.count("c")) == (6, 2, 1)
    again = outer_folds(target, task_type="multiclass", folds=5, seed=3)
    assert all((a == b).all() for a, b in zip(folds, again, strict=True))
    other = outer_folds(target, task_type="multiclass", folds=5, seed=4)
    assert any((a != b).any() for a, b in zip(folds, other, strict=True))
    with pytest.raises(UserError, match="bad --outer-folds"):
        outer_folds(["1", "2"], task_type="regression", folds=3, seed=0)


def _settings(**changes: object) -> Settings:
    base = Settings(budget=60.0, baseline_budget=60.0, split_seed=0, llm="llama", executors=1,
                    address=None, engine_args=("--max-nodes", "3"), protocol="amlb",
                    outer_folds=1)
    return Settings(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_fold_files_split_the_rows_as_written(tmp_path: Path) -> None:
    dataset = REGISTRY["penguins"]
    assert fold_files(dataset, 0, _settings(), tmp_path) == (dataset.path, None)
    original = dataset.path.read_text().splitlines()
    parts = [fold_files(dataset, f, _settings(outer_folds=4), tmp_path) for f in range(4)]
    tests = [test.read_text().splitlines() for _, test in parts if test is not None]
    assert all(lines[0] == original[0] for lines in tests)  # the header, as shipped
    # Every data row is in exactly one test file, and in the other folds' data files.
    assert sorted(line for lines in tests for line in lines[1:]) == sorted(original[1:])
    data0 = parts[0][0].read_text().splitlines()
    assert sorted(data0[1:] + tests[0][1:]) == sorted(original[1:])
    before = parts[0][0].stat().st_mtime_ns
    assert fold_files(dataset, 0, _settings(outer_folds=4), tmp_path) == parts[0]
    assert parts[0][0].stat().st_mtime_ns == before  # written once, then reused


def test_engine_argv_carries_the_protocol_metric_and_the_fold() -> None:
    dataset = REGISTRY["penguins"]
    argv = engine_argv(Job("penguins", "greedy", "policy", 2, 1), dataset, _settings(),
                       Path("out"), Path("d.csv"), Path("t.csv"))
    assert argv[argv.index("--metric") + 1] == "log_loss"
    assert argv[argv.index("--test") + 1] == "t.csv" and argv[argv.index("--seed") + 1] == "2"
    assert argv[-2:] == ["--max-nodes", "3"]
    plain = engine_argv(Job("penguins", "greedy", "policy", 0), dataset,
                        _settings(protocol="sela"), Path("out"), dataset.path, None)
    assert "--test" not in plain and plain[plain.index("--metric") + 1] == "f1_weighted"


def test_every_protocol_metric_has_a_name_in_each_peer_library() -> None:
    for peer, names in PEER_METRICS.items():
        for metrics in PROTOCOLS.values():
            assert set(metrics.values()) <= set(names), peer


def test_a_missing_peer_library_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "autogluon.tabular", None)  # import fails
    monkeypatch.setitem(sys.modules, "flaml.automl", None)
    dataset = REGISTRY["penguins"]
    task = prepare_task(TaskSpec(dataset.path, dataset.target), seed=0)
    for name in ("autogluon", "flaml"):
        with pytest.raises(UserError, match=r"pip install -e '\.\[bench\]'"):
            BASELINES[name](task, 1.0, 0, tmp_path)


def test_cv_score_gives_a_class_missing_from_the_fit_probability_zero() -> None:
    dataset = REGISTRY["penguins"]
    task = prepare_task(TaskSpec(dataset.path, dataset.target, metric="log_loss"), seed=0)
    y = pd.Series(["Adelie", "Gentoo", "Chinstrap"])
    proba = pd.DataFrame({"Adelie": [0.9, 0.1, 0.5], "Gentoo": [0.1, 0.9, 0.5]})
    # Chinstrap had no probability: floored at 1e-15 by the scorer, so its row costs ~34.5.
    value = cv_score(task, y, ["Adelie", "Gentoo", "Adelie"], proba)
    assert value == pytest.approx((-math.log(0.9) * 2 - math.log(1e-15)) / 3, rel=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["--policies", "greedy,nope"], "unknown policy nope"),
    (["--baselines", "xgb"], "unknown baseline xgb"),
    (["--seeds", "0"], "bad --seeds"),
    (["--outer-folds", "0"], "bad --outer-folds"),
    (["--protocol", "kaggle"], "unknown --protocol kaggle"),
    (["--metric", "f1"], "--metric is set by the runner"),
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
    # sela alone: its runs exercise the runner as a greedy run would, and more (the insights
    # step, a resumable tree). Whole searches of two tasks, with baselines: the tests that read
    # them are the slow step's.
    argv = ["--suite", "smoke", "--policies", "sela", "--baselines", "lgbm,optuna",
            "--seeds", "1", "--budget", "90s", "--baseline-budget", "2s", "--split-seed", "7",
            "--llm", f"scripted:{SCRIPT}", "--out", str(out), "--max-nodes", "4",
            # The engine's holdout and no engine work, passed through: the baseline root
            # is then the lgbm baseline on the same rows.
            "--folds", "1", "--no-floor", "--no-ensemble"]
    assert run_main(argv) == 0
    return out


@pytest.mark.slow  # the smoke suite's whole searches (the fixture above): the slow step
def test_smoke_rows_and_run_directories(smoke: Path) -> None:
    rows = pd.read_parquet(smoke / "results.parquet")
    assert list(rows.columns) == list(COLUMNS)
    assert sorted(zip(rows.task, rows.method, strict=True)) == sorted(
        (t, m) for t in ("penguins", "concrete-strength")
        for m in ("sela", "lgbm", "optuna"))
    assert (rows.status == "ok").all() and rows.test.notna().all()
    assert rows[rows.method != "lgbm"].valid.notna().all()  # default LightGBM validates nothing
    assert (rows.seed == 0).all() and (rows.split_seed == 7).all() and (rows.fold == 0).all()
    assert (rows.protocol == "sela").all() and (rows.outer_folds == 1).all()
    assert (rows.cores >= 1).all()
    for task, part in rows.groupby("task"):
        # Searches ran with --seed 0 --split-seed 7, baselines split with seed 7 themselves.
        assert part.data_hash.nunique() == 1, f"{task}: methods saw different splits"
    searches = rows[rows.kind == "policy"]
    # --max-nodes 4, and the engine may add its ensemble of the best once the search is done.
    assert searches.nodes.isin([4, 5]).all() and (searches.prompt_tokens > 0).all()
    for row in searches.itertuples():
        run = RunStore.open(Path(row.run_dir))
        assert Path(row.run_dir).parent == smoke / "runs" / row.task / "fold0" / row.method / \
            "seed0"
        assert run.manifest()["config"]["policy"] == row.method
        nodes = pd.DataFrame(run.read_rows())
        # The engine's baseline root is LightGBM with defaults fitted on train: the baselines'
        # LightGBM fitted on the same rows scores the same, computed by different code paths.
        task = run.load_task()
        X, _, X_test = prepare_features(task)
        model = lightgbm(task, {}, 0).fit(X, task.train[task.target])
        root = nodes[nodes.operator == "baseline"].test_metric_raw.iloc[0]
        assert score(task, submission_csv(task, model, X_test), "test") == pytest.approx(root)
    sela = pd.DataFrame(RunStore.open(Path(
        searches[searches.method == "sela"].run_dir.iloc[0])).read_rows())
    assert {"insights", "sela"} <= set(sela.operator)
    for row in rows[rows.kind == "baseline"].itertuples():
        result = json.loads((Path(row.run_dir) / "result.json").read_text())
        assert result["test"] == row.test and result["data_hash"] == row.data_hash
        assert result["seconds"] == row.seconds and result["fits"] == row.nodes >= 1
    for row in rows[rows.method == "optuna"].itertuples():
        curve = json.loads((Path(row.run_dir) / "result.json").read_text())["curve"]
        assert len(curve) == row.nodes
        # Its valid is the best cross-validated trial; the first trial is LightGBM's defaults.
        best = max if row.metric != "rmse" else min
        assert row.valid == best(v for _, v in curve)


@pytest.mark.slow  # the smoke suite's whole searches (the fixture above): the slow step
def test_smoke_rerun_skips_done_rows_and_measures_finished_runs(smoke: Path) -> None:
    path = smoke / "results.parquet"
    before = pd.read_parquet(path)
    dirs = sorted(p for p in (smoke / "runs").rglob("manifest.json"))
    # A row lost after its run finished: the rerun measures the run instead of searching again.
    dropped = before[(before.method == "sela") & (before.task == "penguins")]
    save_results(path, before.drop(index=dropped.index))
    argv = ["--suite", "smoke", "--policies", "sela", "--baselines", "lgbm,optuna",
            "--seeds", "1", "--budget", "90s", "--split-seed", "7", "--llm", f"scripted:{SCRIPT}",
            "--out", str(smoke)]
    assert run_main(argv) == 0
    after = pd.read_parquet(path)
    assert sorted(p for p in (smoke / "runs").rglob("manifest.json")) == dirs
    assert len(after) == len(before)
    restored = after[(after.method == "sela") & (after.task == "penguins")].iloc[0]
    assert restored.run_dir == dropped.run_dir.iloc[0] and restored.test == dropped.test.iloc[0]
    # One OUT, one protocol: another is refused before anything runs or is written.
    assert run_main([*argv, "--protocol", "amlb"]) == 2
    assert run_main([*argv, "--outer-folds", "2"]) == 2
    pd.testing.assert_frame_equal(pd.read_parquet(path), after)


def test_results_from_before_protocols_count_as_sela_on_the_engine_split(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = pd.DataFrame([{"task": "penguins", "task_type": "multiclass", "metric": "f1_weighted",
                         "method": "lgbm", "kind": "baseline", "seed": 0, "split_seed": 0,
                         "status": "ok", "error": "", "test": 0.9}])
    old.to_parquet(tmp_path / "results.parquet", index=False)
    argv = ["--suite", "penguins", "--policies", "", "--baselines", "lgbm", "--seeds", "1",
            "--out", str(tmp_path)]
    assert run_main([*argv, "--protocol", "amlb"]) == 2
    assert "holds runs with --protocol sela, not amlb" in capsys.readouterr().err
    assert run_main(argv) == 0
    assert "1 jobs, 1 already in" in capsys.readouterr().out


@pytest.mark.slow  # the smoke suite's whole searches (the fixture above): the slow step
def test_smoke_report(smoke: Path) -> None:
    out = report.write_report(smoke / "results.parquet", smoke / "report.md")
    text = out.read_text()
    for heading in ("Fairness rule", "Test score per task", "SELA normalised score",
                    "relative to LightGBM", "Average rank", "Wins / ties / losses against sela",
                    "Wins / ties / losses against optuna", "Wall time", "Runs"):
        assert heading in text
    assert "| task | metric | sela | lgbm | optuna |" in text
    assert text.count("| penguins |") >= 4 and "| concrete-strength |" in text
    assert "No `autogluon` runs in these results" in text
    assert (smoke / "report-curves.png").stat().st_size > 5000
    assert (smoke / "report-scores.png").stat().st_size > 5000
    print(text)


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_amlb_protocol_with_outer_folds_end_to_end(tmp_path: Path) -> None:
    """Two outer folds under AMLB's metrics: the engine gets --metric and the fold's --test, and
    a search and the baselines of one fold see the same data, another fold other data."""
    argv = ["--suite", "penguins", "--policies", "greedy", "--baselines", "lgbm,optuna",
            "--seeds", "1", "--budget", "60s", "--baseline-budget", "1s", "--protocol", "amlb",
            "--outer-folds", "2", "--llm", f"scripted:{SCRIPT}", "--out", str(tmp_path),
            "--max-nodes", "1"]
    assert run_main(argv) == 0
    rows = pd.read_parquet(tmp_path / "results.parquet")
    assert len(rows) == 6 and (rows.status == "ok").all() and (rows.protocol == "amlb").all()
    assert (rows.metric == "log_loss").all() and sorted(rows.fold) == [0, 0, 0, 1, 1, 1]
    hashes = rows.groupby("fold").data_hash.nunique()
    assert (hashes == 1).all() and rows.data_hash.nunique() == 2
    search = rows[rows.kind == "policy"].iloc[0]
    run = RunStore.open(Path(search.run_dir))
    assert run.manifest()["metric"] == "log_loss"
    task = run.load_task()
    fold_test = tmp_path / "folds" / "penguins" / f"fold{search.fold}" / "test-penguins.csv"
    assert len(task.test_X) == len(pd.read_csv(fold_test))  # the fold's rows are the test split
    X, y = learning_rows(task)
    assert len(X) == len(y) == len(task.train) + len(task.valid_X)
    text = report.write_report(tmp_path / "results.parquet", tmp_path / "report.md").read_text()
    assert "protocol amlb" in text and "2 outer folds" in text
    assert "SELA normalised score" not in text


@pytest.mark.slow  # a whole search, over 20 s
def test_the_floor_arm_is_a_search_without_any_llm(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`--floor-arm` alone: one engine search with --llm none, in this process; an LLM pool
    that started would fail the run."""
    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("an LLM pool was started")

    monkeypatch.setattr("actors.workers.LLMPool.__init__", no_pool)
    argv = ["--suite", "penguins", "--policies", "", "--baselines", "", "--floor-arm",
            "--seeds", "1", "--budget", "90s", "--out", str(tmp_path), "--max-nodes", "4"]
    assert run_main(argv) == 0
    (row,) = pd.read_parquet(tmp_path / "results.parquet").to_dict("records")
    assert (row["method"], row["status"], row["kind"]) == (FLOOR, "ok", "policy"), row["error"]
    assert row["test"] is not None and row["prompt_tokens"] == row["completion_tokens"] == 0
    assert row["programs_proposed"] == row["programs_kept"] == 0
    assert not row["answer_uses_program"] and row["program_llm_seconds"] is None
    assert row["answer_unkept_share"] == 0.0
    assert row["llm_retired_seconds"] is None and row["llm_retired_why"] == ""
    assert row["program_exec_seconds"] == 0 and row["exec_seconds"] > 0
    run = Path(row["run_dir"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model"] == "none" and manifest["config"]["llm"] == "none"
    assert manifest["config"]["executors"] == 2  # the runner's 1, and the LLM's core
    nodes = pd.read_parquet(run / "nodes")
    assert len(nodes) == 4 and (nodes.status == "ok").all(), nodes[["operator", "error"]]
    assert all(Operator(op).traits.engine_written for op in nodes.operator)
    assert (nodes.llm_actor == "").all() and (nodes.prompt == "").all()
    assert manifest["result"]["best_node"] in set(nodes.node_id)
    assert (run / "best" / "solution.py").is_file()
    assert "- LLM: none: the engine's floor alone" in (run / "summary.md").read_text()


@pytest.mark.slow  # the smoke suite's whole searches (the fixture above): the slow step
def test_smoke_sela_run_resumes_its_tree(smoke: Path, tmp_path: Path) -> None:
    """A copy of the smoke suite's sela run, resumed: the pools written before are kept (no new
    insights request), rollouts go down the stages, a failed rollout is debugged."""
    (run,) = (smoke / "runs" / "penguins" / "fold0" / "sela" / "seed0").iterdir()
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    assert engine_main(["--resume", str(copy), "--split-seed", "1"]) == 2  # the split is fixed
    # its own budget: the smoke run's 90 s went to its search and to saving its answer
    assert engine_main(["--resume", str(copy), "--max-nodes", "11", "--budget", "3m",
                        "--quiet"]) == 0
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
