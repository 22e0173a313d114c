"""The expert and null program arms (benchmarks/program_arms.py), the runner's `--program-arms`
and the keep-rule study (benchmarks/gate_power.py): the programs pass the engine's own checks on
their task's real rows, the null ones tell nothing of the target, and the study's rules count
what they keep."""

from __future__ import annotations

import ast
import json
import random
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import gate_power
from benchmarks.datasets import REGISTRY
from benchmarks.program_arms import ARMS, EXPERT, arm_programs, null_programs, scripted_replies
from benchmarks.run import FLOOR, Job, Settings, arm_replies, engine_argv, plan_jobs
from common.errors import UserError
from operators.features import assigned_columns, check_program


def _rows(task: str, rows: int = 400) -> tuple[pd.DataFrame, pd.Series]:
    dataset = REGISTRY[task]
    frame = pd.read_csv(dataset.path).sample(frac=1.0, random_state=0).head(rows)
    return frame.drop(columns=dataset.target), frame[dataset.target]


@pytest.mark.parametrize("task", sorted(EXPERT))
def test_every_expert_program_passes_the_checks_and_adds_its_columns(task: str) -> None:
    features, _ = _rows(task)
    target = REGISTRY[task].target
    for program in EXPERT[task]:
        assert check_program(program, list(features.columns), target) == "", program
        added = assigned_columns(ast.parse(program))
        out = gate_power._apply(program, features)
        assert added and added <= set(out.columns) - set(features.columns), program
        for column in added:  # a map names every level of its column: nothing left missing
            assert out[column].isna().mean() <= features.isna().any(axis=1).mean(), column


@pytest.mark.parametrize("task", ["concrete-strength", "kc1", "wine-quality-white"])
def test_null_programs_pass_the_checks_and_tell_nothing_of_the_target(task: str) -> None:
    features, target = _rows(task, 2000)
    numeric = [c for c in features.columns if pd.api.types.is_numeric_dtype(features[c])]
    programs = null_programs(numeric)
    assert len(programs) == 8 and len(set(programs)) == 8
    distinct = len(features[numeric].drop_duplicates())
    for i, program in enumerate(programs):
        assert check_program(program, list(features.columns), REGISTRY[task].target) == ""
        column = gate_power._apply(program, features)[f"null_{i}"]
        # noise: spread over [0, 1), a value a row, no rank correlation with the target
        assert column.between(0, 1).all() and column.nunique() > 0.9 * distinct, program
        assert abs(column.corr(target.astype(float), method="spearman")) < 0.1, program


def test_arm_programs_name_what_is_wrong() -> None:
    assert arm_programs("expert", "credit-g", ["any"]) == EXPERT["credit-g"]
    with pytest.raises(UserError, match="unknown program arm 'oracle'"):
        arm_programs("oracle", "credit-g", ["a"])
    with pytest.raises(UserError, match="no expert programs for 'segment'"):
        arm_programs("expert", "segment", ["a"])
    with pytest.raises(UserError, match="at least one numeric column"):
        null_programs([])


def test_scripted_replies_are_fenced_programs_in_order(tmp_path: Path) -> None:
    path = scripted_replies(EXPERT["penguins"], tmp_path / "replies.json")
    replies = json.loads(path.read_text())["features"]
    assert [r.removeprefix("```python\n").removesuffix("```") for r in replies] == list(
        EXPERT["penguins"])


def test_the_runner_runs_each_arm_as_a_scripted_feature_search_with_the_floors_cpus() -> None:
    datasets = [REGISTRY["penguins"]]
    jobs = plan_jobs(datasets, ["greedy"], [], 1, floor_arm=True, program_arms=ARMS)
    assert [j.method for j in jobs] == ["greedy", "expert", "null", FLOOR]
    settings = Settings(budget=60, baseline_budget=60, split_seed=0, llm="llama", executors=1,
                        address=None, engine_args=("--max-nodes", "3"), protocol="amlb")
    folder = Path("out/runs/penguins/fold0/expert/seed0")
    argv = engine_argv(Job("penguins", "expert", "policy", 0), REGISTRY["penguins"], settings,
                       folder, Path("d.csv"), None)
    assert argv[argv.index("--llm") + 1] == f"scripted:{arm_replies(folder)}"
    assert argv[-2:] == ["--llm-writes", "features"] and "--policy" not in argv
    llm = engine_argv(Job("penguins", "greedy", "policy", 0), REGISTRY["penguins"], settings,
                      folder, Path("d.csv"), None)
    floor = engine_argv(Job("penguins", FLOOR, "policy", 0), REGISTRY["penguins"], settings,
                        folder, Path("d.csv"), None)
    executors = [a[a.index("--executors") + 1] for a in (argv, llm, floor)]
    assert executors == ["2", "1", "2"]
    assert "--llm-writes" not in llm


# ---- the study's rules -------------------------------------------------------------------------


def _record(arm: str, gains: list[list[list[float]]], test_gain: float) -> gate_power.Record:
    return gate_power.Record("t", 0, arm, 0, "", "rmse", gains, test_gain, -1.0)


def _draw(rng: random.Random, shift: float, repeats: int = 3) -> list[list[list[float]]]:
    return [[[rng.gauss(shift, 1.0) for _ in range(5)] for _ in range(2)]
            for _ in range(repeats)]


def test_the_t_test_rules_keep_chance_at_their_rate_and_a_real_gain_more_often() -> None:
    rng = random.Random(0)
    nulls = [_record("null", _draw(rng, 0.0), 0.0) for _ in range(2000)]
    goods = [_record("expert", _draw(rng, 0.8), 0.1) for _ in range(500)]
    for name, rule in gate_power.RULES.items():
        if "rows better" in name:  # reads the rows' predictions, which these records lack
            continue
        false = statistics.fmean(rule(g) for g in nulls)
        power = statistics.fmean(rule(g) for g in goods)
        if "p<0.01" in name:
            assert false < 0.02, (name, false)
        if "p<0.05" in name:
            assert false < 0.07, (name, false)
        if "p<0.10" in name:
            assert false < 0.13, (name, false)
        assert power > false, name
    today = gate_power.RULES["today: every fold better (1x5, 2 seeds)"]
    tested = gate_power.RULES["t-test p<0.05 (1x5, 2 seeds)"]
    assert statistics.fmean(map(tested, goods)) > statistics.fmean(map(today, goods))


def test_the_table_counts_false_keeps_and_the_experts_kept_that_helped() -> None:
    rng = random.Random(1)
    records = ([_record("null", _draw(rng, 0.0), 0.0) for _ in range(20)]
               + [_record("expert", _draw(rng, 3.0), 0.1) for _ in range(4)]
               + [_record("expert", _draw(rng, -3.0), -0.1) for _ in range(2)])
    text = gate_power.table(records)
    assert "20 null and 6 expert programs (4 helped on the test rows)" in text
    row = next(line for line in text.splitlines() if line.startswith("| t-test p<0.05 (1x5"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "4 / 4" and cells[4] == "0 / 2"
    assert int(cells[1].split(" / ")[0]) <= 3


@pytest.mark.slow  # 20 LightGBM fits on penguins: about 10 s
def test_fits_compare_a_program_with_its_absence_on_the_same_folds() -> None:
    fits = gate_power.Fits(REGISTRY["penguins"], 0, 2, 1, 8000)
    base = fits.without()
    assert np.array(base.folds).shape == (1, 2, 5) and base.test < 0  # log loss, negated
    assert base.predictions[0].shape == (len(fits.y_dev), 3)  # every dev row, each class
    again = fits.scores(null_programs(fits.numeric)[0])  # a noise column, on the same splits
    gains = np.array(again.folds) - np.array(base.folds)
    assert np.abs(gains).max() < 0.1
    assert fits.row_share(base.predictions[0], base.predictions[0]) == 0.5  # ties count half
    assert 0.0 <= fits.row_share(again.predictions[0], base.predictions[0]) <= 1.0


def test_the_resplit_truth_says_helps_hurts_or_unclear_and_counts_helpful_nulls_apart() -> None:
    rng = random.Random(2)

    def truth(shift: float) -> list[float]:
        return [rng.gauss(shift, 1.0) for _ in range(20)]

    helps = replace(_record("expert", _draw(rng, 3.0), 0.1), truth_gains=truth(2.0))
    hurts = replace(_record("expert", _draw(rng, -3.0), -0.1), truth_gains=truth(-2.0))
    unclear = replace(_record("expert", _draw(rng, -3.0), 0.1), truth_gains=[1.0, -1.0] * 10)
    assert [gate_power.truth_verdict(r) for r in (helps, hurts, unclear)] == [
        "helps", "hurts", "unclear"]
    assert gate_power.truth_verdict(_record("expert", _draw(rng, 0.0), 0.0)) == ""
    hashed = replace(_record("null", _draw(rng, 3.0), 0.0), truth_gains=truth(2.0),
                     program='def add_features(df):\n    df["null_3"] = 1\n    return df\n')
    nulls = [replace(_record("null", _draw(rng, 0.0), 0.0), truth_gains=truth(0.0))
             for _ in range(20)]
    text = gate_power.table([helps, hurts, unclear, hashed, *nulls])
    assert "counted apart: t null_3." in text
    row = next(line for line in text.splitlines()
               if line.startswith("| t-test p<0.05 (1x5") and "| 1 / 1 | 0 / 1 | 0 / 1 |" in line)
    assert row.split("|")[2].strip().endswith("/ 20")  # the helpful null is not among them


@pytest.mark.slow  # 4 halves of concrete, each fitted with and without 13 programs: about 10 s
def test_the_resplit_truth_fits_each_program_on_the_same_halves_as_its_absence() -> None:
    truth = gate_power.resplit_truth(REGISTRY["concrete-strength"], 4, 8000)
    assert len(truth) == 5 + 8 and all(len(gains) == 4 for gains in truth.values())
    ratio = gate_power.arm_programs("expert", "concrete-strength", [])[0]
    noise = next(program for program in truth if '"null_0"' in program)
    # the water/cement ratio lowers the error on most halves; noise raises it on most
    assert sum(g > 0 for g in truth[ratio]) >= 3
    assert statistics.fmean(truth[noise]) < statistics.fmean(truth[ratio])
