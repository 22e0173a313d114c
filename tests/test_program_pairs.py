"""benchmarks/program_pairs.py: every scored feature program run again with fresh pairs, the
gates' choices judged by the test gains of pairs no gate used; the table from faked records,
and for real on a scripted search's run (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import benchmarks.program_pairs as pairs
from engine.run import main as run_main
from tests.helpers import only_run

HELPS = 'def add_features(df):\n    df["ab"] = df["a"] * df["b"]\n    return df\n'
NOISE = 'def add_features(df):\n    df["s"] = np.sin(df["c"] * 997.0)\n    return df\n'


def _paired(node_id: str, run_gains: tuple[float, ...], seed_gains: list[tuple[float, ...]],
            test_gains: tuple[float, ...]) -> pairs.Paired:
    return pairs.Paired("run", node_id, ("x",), False, run_gains, tuple(seed_gains), test_gains)


def test_each_gate_is_judged_by_the_test_gains_of_pairs_it_did_not_use(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = (0.1,) * 5, (-0.1,) * 5
    programs = [
        # the run's gate refused it (a lucky reference); fresh pairs keep it; it helps
        _paired("a", bad, [good, good], (0.2, 0.2, 0.3)),
        # the run's gate kept it; one fresh pair agrees, two do not; it hurts
        _paired("b", good, [good, (-0.3,) * 5], (0.1, -0.1, -0.2)),
        # a family without a seed: one pair, whose own test gain is the truth
        _paired("c", good, [good], (0.05,)),
    ]
    text = pairs.table(programs, gate_seeds=2)
    assert text.startswith("3 scored programs in 1 runs; 2 help by the truth")
    assert "| the run's (against the reference's stored predictions) | 2 | 1 (50%) |" in text
    assert "| fresh pairs, 1 seed | 3 | 2 (67%) |" in text
    assert "| fresh pairs, 2 seeds | 2 | 2 (100%) | +0.175 | 0 of 1 (0%) |" in text
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(p.__dict__) + "\n" for p in programs))
    assert pairs.main([str(records), "--seeds", "3", "--gate-seeds", "2"]) == 0
    assert capsys.readouterr().out.strip() == text.strip()  # read back, not run again


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert pairs.main([str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert pairs.main([str(tmp_path), "--seeds", "2", "--gate-seeds", "2"]) == 2
    assert "--gate-seeds must be from 1 to" in capsys.readouterr().err
    assert pairs.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no scored feature program" in err and "\n" not in err


@pytest.mark.slow
def test_a_runs_programs_are_run_again_and_reproduce_its_gate(tmp_path: Path) -> None:
    """The baseline root (LightGBM's defaults) fits the same model on every seed, so a
    program's replay must give the run's own gate gains; a program that helps (y is a * b)
    helps on the test rows too, and one of noise does not."""
    rng = np.random.default_rng(0)
    a, b, c = rng.uniform(-2, 2, size=(3, 400))
    pd.DataFrame({"a": a, "b": b, "c": c, "y": a * b + 0.05 * rng.normal(size=400)}).to_csv(
        tmp_path / "train.csv", index=False)
    (tmp_path / "replies.json").write_text(json.dumps(
        {"features": [f"```python\n{p}```" for p in (HELPS, NOISE)]}))
    out = tmp_path / "runs"
    assert run_main(["--data", str(tmp_path / "train.csv"), "--target", "y",
                     "--llm", f"scripted:{tmp_path / 'replies.json'}", "--llm-writes",
                     "features", "--no-floor", "--no-ensemble", "--max-nodes", "3",
                     "--budget", "4m", "--folds", "3", "--executors", "2", "--quiet",
                     "--out", str(out)]) == 0
    records = tmp_path / "records.jsonl"
    assert pairs.main([str(out), "--seeds", "2", "--gate-seeds", "1",
                       "--records", str(records)]) == 0
    found = {p.added: p for p in map(pairs.Paired.from_record,
                                     map(json.loads, records.read_text().splitlines()))}
    assert set(found) == {("ab",), ("s",)} and all(p.run == str(only_run(out)) for p in
                                                    found.values())
    for program in found.values():
        assert len(program.seed_gains) == 2
        assert program.seed_gains[0] == pytest.approx(program.run_gains, abs=1e-6)
    assert found[("ab",)].run_kept and pairs._truth(found[("ab",)], 1) > 0
    assert pairs._truth(found[("s",)], 1) < pairs._truth(found[("ab",)], 1)
