"""benchmarks/seed_luck.py: the floor's best nodes run again on other seeds; the gap sign and
the table from faked results, bad input as one line, and for real on a run (slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import benchmarks.seed_luck as luck
from engine.run import main as run_main
from operators.context import TaskContext
from operators.models import TRIAL_SEED, model_code, seeded
from search.families import FAMILIES


def _reseeded(maximize: bool, own: float, others: tuple[float, ...]) -> luck.Reseeded:
    return luck.Reseeded("a/b/c/d/e/f", "n1", "lgbm", maximize, own, own, others, others)


def test_the_gap_is_above_zero_when_the_own_seed_looked_better() -> None:
    rmse = _reseeded(False, 4.9, (5.1, 5.3))  # lower is better: own beat the others by 0.3
    auc = _reseeded(True, 0.80, (0.78, 0.79))
    assert rmse.gap(rmse.own_valid, rmse.valid) == pytest.approx(0.3)
    assert auc.gap(auc.own_valid, auc.valid) == pytest.approx(0.015)
    unlucky = _reseeded(False, 5.4, (5.1, 5.3))
    assert unlucky.gap(unlucky.own_valid, unlucky.valid) < 0
    text = luck.table([rmse, auc, unlucky])
    assert "| 4.9 / 5.2 (5.1 to 5.3) | +0.3 |" in text
    assert text.rstrip().endswith("3 nodes: the own seed looked better than the other seeds' "
                                  "mean on valid for 2, on test for 2.")


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert luck.main([str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert luck.main([str(tmp_path), "--seeds", "0"]) == 2
    assert "--seeds and --top must be at least 1" in capsys.readouterr().err
    assert luck.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no engine-written node of a seeded family" in err and "\n" not in err


@pytest.mark.slow
def test_a_deterministic_configuration_has_no_luck(tmp_path: Path) -> None:
    """The baseline root is LightGBM's defaults, which draw nothing at random: on other seeds it
    must score exactly its own valid and test scores, so any gap the tool reports is the seed's."""
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-2, 2, size=(2, 300))
    pd.DataFrame({"a": a, "b": b, "y": a * b + 0.1 * rng.normal(size=300)}).to_csv(
        tmp_path / "train.csv", index=False)
    out = tmp_path / "runs"
    assert run_main(["--data", str(tmp_path / "train.csv"), "--target", "y",
                     "--llm", "none", "--no-floor", "--no-ensemble", "--max-nodes", "1",
                     "--budget", "3m", "--folds", "3", "--executors", "1", "--quiet",
                     "--out", str(out)]) == 0
    report = tmp_path / "luck.md"
    assert luck.main([str(out), "--seeds", "2", "--top", "1", "--out", str(report)]) == 0
    text = report.read_text()
    row = next(line for line in text.splitlines() if "| lgbm |" in line)
    assert abs(float(row.split("|")[5])) < 1e-6 and abs(float(row.split("|")[7])) < 1e-6
    assert text.rstrip().endswith("on valid for 0, on test for 0.")


def test_every_seeded_family_fits_with_the_one_seed_the_tool_replaces() -> None:
    """The tool reseeds a node by rewriting `random_state=0`: a family whose code spelled its
    seed otherwise would be refitted on seed 0 every time and show no luck at all."""
    ctx = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                      maximize=False)
    families = [family for family in FAMILIES if seeded(ctx, family)]
    assert families == ["lgbm", "extra_trees", "random_forest", "hist_gb"]
    for family in families:
        assert model_code(ctx, family, {}).count(TRIAL_SEED) == 1, family
