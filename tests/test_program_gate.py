"""A feature program's gate judges fresh pairs: the program's run, for real in the sandbox, also
fits the reference configuration with and without the program on new seeds, on the run's folds
and on other splits of the same rows, and the gate compares those, never the reference's own
stored predictions (the best of many trials, and so partly its seed's luck)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.evaluation.folds import Folds, all_folds_inputs, dev_labels, make_folds
from engine.evaluation.program_gate import fresh_pairs, gate_round, group_gains
from engine.evaluation.scoring import read_submission
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.context import TaskContext
from operators.harness import assemble
from operators.measure import split_measurements
from operators.models import TRIAL_SEED, model_code, seeded
from sandbox import Limits, run_script
from search.families import FAMILIES
from search.programs import GATE_PAIRS, Gate, gate_pairs, judge

HELPS = 'def add_features(df):\n    df["ab"] = df["a"] * df["b"]\n    return df\n'
# bagged rows and columns: a seed changes the model
NOISY = {"n_estimators": 60, "learning_rate": 0.1, "num_leaves": 8, "min_child_samples": 5,
         "subsample": 0.6, "colsample_bytree": 0.6, "reg_alpha": 1e-8, "reg_lambda": 1e-8}
CTX = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                  maximize=False)


def program_gate(task: PreparedTask, folds: Folds, truth: pd.Series, added: tuple[str, ...],
                 gate_csv: bytes | None, kept_without: tuple[pd.DataFrame, ...] = (),
                 splits: tuple[int, ...] = (0, 0)) -> tuple[Gate, tuple[pd.DataFrame, ...]]:
    """The gate of a program whose one run wrote all its pairs (each on its split), as the
    step judges it."""
    pairs = gate_round(task, folds, truth, gate_csv, kept_without, splits)
    if pairs.problem:
        return pairs.unjudged("ref", added), ()
    return judge("ref", added, pairs.seed_gains, pairs.reused, splits), pairs.without


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    rng = np.random.default_rng(1)
    rows = 300
    a, b, c = rng.uniform(-2, 2, size=(3, rows))
    frame = pd.DataFrame({"a": a, "b": b, "c": c, "y": a * b + 0.1 * rng.normal(size=rows)})
    path = tmp_path_factory.mktemp("gate") / "data.csv"
    frame.to_csv(path, index=False)
    return prepare_task(TaskSpec(path, "y", None, "rmse", ""))


def test_a_seeded_family_gets_every_pair_and_a_seedless_one_a_pair_per_split() -> None:
    pairs = gate_pairs(seeded(CTX, "lgbm"))
    lgbm = model_code(CTX, "lgbm", NOISY, [HELPS], gate_pairs=pairs)
    assert f"GATE_PAIRS = {GATE_PAIRS!r}" in lgbm and "random_state=seed" in lgbm
    assert "FEATURE_PROGRAMS[:-1]" in lgbm
    linear = model_code(CTX, "linear", {"alpha": 1.0}, [HELPS],
                        gate_pairs=gate_pairs(seeded(CTX, "linear")))
    assert "GATE_PAIRS = ((0, 1), (1, 3), (2, 5))" in linear
    assert "gate_models" not in model_code(CTX, "lgbm", NOISY, [HELPS])
    assert "gate_models" not in model_code(CTX, "lgbm", NOISY, gate_pairs=pairs)  # no program
    # every trial fits with seed 0: the pairs must not share it
    assert 0 not in {seed for _, seed in GATE_PAIRS}


def test_the_gate_compares_fresh_pairs_not_the_references_stored_luck(
        task: PreparedTask, tmp_path: Path) -> None:
    folds = make_folds(task, 3, seed=0)
    held = folds.held_out
    truth = dev_labels(task).iloc[held]
    pairs_fitted = ((0, 1), (0, 2), (1, 3))
    code = assemble(CTX, model_code(CTX, "lgbm", NOISY, [HELPS], gate_pairs=pairs_fitted),
                    all_folds=True)
    result = run_script(code, all_folds_inputs(task, folds), Limits(wall_seconds=120),
                        workdir_root=tmp_path)
    assert result.status == "ok", result.stderr_tail
    assert result.gate_csv is not None
    # the harness times the pairs' fits apart from the node's own (no part of its refit)
    measured, _ = split_measurements(result.stdout_tail)
    assert measured.gate_seconds is not None and measured.train_seconds is not None
    assert 0 < measured.gate_seconds < result.seconds - measured.train_seconds
    pairs = fresh_pairs(task, result.gate_csv, len(held))
    assert len(pairs) == 3
    with_1, with_2 = pairs[0][0], pairs[1][0]
    assert not np.allclose(with_1["prediction"], with_2["prediction"])  # the seed is used
    y = truth.to_numpy()

    def rmse(frame: pd.DataFrame) -> float:
        return float(np.sqrt(np.mean((frame["prediction"].to_numpy() - y) ** 2)))

    for with_program, without in pairs:  # y is a * b
        assert rmse(with_program) < rmse(without)
    # the third pair learnt on other folds: a row's model saw other rows than in split 0
    assert not (folds.gate_groups(1) == folds.gate_groups(0)).all()
    # A reference whose stored predictions are the truth itself, the luckiest there is:
    # against them the program's node loses on every fold; the fresh pairs keep it.
    own = read_submission(task, result.valid_csv, "valid", len(held))
    lucky = truth.rename("prediction").to_frame().reset_index(drop=True)
    assert all(g < 0 for g in group_gains(task, truth, own, lucky, folds.groups()))
    gate, _ = program_gate(task, folds, truth, ("ab",), result.gate_csv, splits=(0, 0, 1))
    assert gate.kept and gate.pairs == 3 and len(gate.gains) == 6, gate  # 2 splits of 3 folds
    assert all(g > 0 for g in gate.gains) and gate.splits == (0, 0, 1)


def test_on_the_holdout_every_split_is_the_holdout_grouped_at_random(
        task: PreparedTask, tmp_path: Path) -> None:
    folds = make_folds(task, 1, seed=0)
    assert folds.gate_of == ()
    truth = dev_labels(task).iloc[folds.held_out]
    code = assemble(CTX, model_code(CTX, "lgbm", NOISY, [HELPS], gate_pairs=((0, 1), (1, 3))),
                    all_folds=True)
    result = run_script(code, all_folds_inputs(task, folds), Limits(wall_seconds=120),
                        workdir_root=tmp_path)
    assert result.status == "ok", result.stderr_tail
    gate, _ = program_gate(task, folds, truth, ("ab",), result.gate_csv, splits=(0, 1))
    assert gate.pairs == 2 and len(gate.gains) == 10 and gate.kept, gate
    assert not (folds.gate_groups(1) == folds.gate_groups(0)).all()


def test_a_run_with_the_kept_sides_without_the_program_gives_the_same_gate(
        task: PreparedTask, tmp_path: Path) -> None:
    """The sides without the program are the same models on the same rows whichever program's
    run fits them: a run fitting the sides with the program alone, judged against the sides
    kept from a run that fitted both, gives that run's gate."""
    folds = make_folds(task, 3, seed=0)
    truth = dev_labels(task).iloc[folds.held_out]
    results = []
    for without in (True, False):
        code = assemble(CTX, model_code(CTX, "lgbm", NOISY, [HELPS],
                                        gate_pairs=((0, 1), (0, 2)), gate_without=without),
                        all_folds=True)
        results.append(run_script(code, all_folds_inputs(task, folds),
                                  Limits(wall_seconds=120), workdir_root=tmp_path))
        assert results[-1].status == "ok", results[-1].stderr_tail
    both, alone = (r.gate_csv for r in results)
    assert both is not None and alone is not None
    assert sorted(pd.read_csv(io.BytesIO(alone))["fold"].unique()) == [0, 2]
    gate, without = program_gate(task, folds, truth, ("ab",), both)
    assert len(without) == 2 and not gate.reused
    again, used = program_gate(task, folds, truth, ("ab",), alone, without)
    assert again.reused and all(u is w for u, w in zip(used, without, strict=True))
    assert again.gains == pytest.approx(gate.gains) and again.kept == gate.kept
    refused, _ = program_gate(task, folds, truth, ("ab",), alone)  # nothing kept
    assert not refused.kept and "expected 2 pairs" in refused.reason


def test_a_gate_file_without_pairs_is_not_kept_and_says_why(task: PreparedTask) -> None:
    folds = make_folds(task, 3, seed=0)
    truth = dev_labels(task).iloc[folds.held_out]
    odd = io.StringIO()
    truth.rename("prediction").to_frame().assign(fold=0).to_csv(odd, index=False)  # one block
    gate, _ = program_gate(task, folds, truth, (), odd.getvalue().encode())
    assert not gate.kept and "expected 2 pairs" in gate.reason and gate.gains == ()
    gate, _ = program_gate(task, folds, truth, (), None)
    assert not gate.kept and "no fresh pairs" in gate.reason


def test_the_gates_gains_are_stored_as_the_rule_counted_them(task: PreparedTask) -> None:
    """Gains far below the metric's usual digits still count for the rule: stored rounded,
    a kept program's recorded mean gain would say +0 beside a tally that kept it."""
    folds = make_folds(task, 3, seed=0)
    truth = dev_labels(task).iloc[folds.held_out]
    pair = io.StringIO()
    for block, off in enumerate((1e-7, 3e-7)):  # with the program, then without: 2e-7 better
        (truth + off).rename("prediction").to_frame().assign(fold=block).to_csv(
            pair, index=False, header=block == 0)
    gate, _ = program_gate(task, folds, truth, ("ab",), pair.getvalue().encode(), splits=(0,))
    assert gate.kept and gate.mean_gain == pytest.approx(2e-7, rel=1e-3), gate
    assert f"mean gain {gate.mean_gain:+.4g}" in gate.reason


def test_every_seeded_family_spells_its_seed_as_the_gate_replaces_it() -> None:
    """`gate_part` reseeds a configuration by rewriting `random_state=0`: a family whose code
    spelled its seed otherwise would fit the same model on every gate seed and show its own
    seed's luck as the program's gain."""
    families = [family for family in FAMILIES if seeded(CTX, family)]
    assert families == ["lgbm", "extra_trees", "random_forest", "hist_gb", "catboost"]
    for family in families:
        assert model_code(CTX, family, {}).count(TRIAL_SEED) == 1, family
