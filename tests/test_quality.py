"""The quality benchmark's verdicts and table: a lower RMSE and a higher F1 are both "better"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.quality import main, table, verdict


def row(metric: str, baseline: float, best: float, **more: Any) -> dict[str, Any]:
    return {"task": "t", "metric": metric, "baseline_test": baseline, "best_test": best,
            "best_valid": 0.5, "best_operator": "ensemble", "best_valid_node_test": 0.7,
            "lightgbm_default_test": 0.6, "debug_fixed": 1, "debugs": 4, "nodes": 9,
            "ok_llm_nodes": 5, **more}


def test_verdict_follows_the_metric_direction() -> None:
    assert verdict(row("rmse", 4.8, 4.7), higher=False) == "better"
    assert verdict(row("rmse", 4.8, 4.9), higher=False) == "worse"
    assert verdict(row("f1", 0.80, 0.85), higher=True) == "better"
    assert verdict(row("f1", 0.80, 0.80), higher=True) == "tie"
    assert verdict(row("f1", 0.80, None), higher=True) == "n/a"  # type: ignore[arg-type]


def test_table_has_one_line_per_task_with_its_verdict() -> None:
    text = table([row("rmse", 4.8, 4.7), row("f1_weighted", 0.64, 0.63)])
    lines = text.splitlines()
    assert len(lines) == 4 and "best-valid node test" in lines[0]
    assert "| better |" in lines[2] and "| worse |" in lines[3]
    assert "| 0.7 |" in lines[2] and "1/4" in lines[2] and "9 (5)" in lines[2]


def test_a_second_run_resumes_and_a_different_budget_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done = {**row("rmse", 4.8, 4.7), "task": "concrete-strength", "budget": "15m"}
    (tmp_path / "quality.json").write_text(json.dumps([done]))
    # The one task of the suite is there already: nothing runs (no --llm would work here).
    assert main(["--suite", "concrete-strength", "--out", str(tmp_path), "--llm", "nope"]) == 0
    printed = capsys.readouterr().out
    assert "concrete-strength: already in" in printed and "| concrete-strength | rmse |" in printed
    assert not (tmp_path / "concrete-strength").exists()
    assert main(["--suite", "concrete-strength", "--out", str(tmp_path), "--budget", "5m"]) == 2
    assert "holds runs with budget 15m, not 5m" in capsys.readouterr().err
