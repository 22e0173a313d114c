"""The data analyst step for real: an LLM-written exploration script runs in the sandbox before
any draft, and what it prints joins every later prompt (only the LLM is scripted)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from engine.records.store import RunStore
from engine.run import main
from engine.search_run import task_context
from engine.task.prepare import TaskSpec, prepare_task
from operators.analyst import parse_analysis, trim_findings
from sandbox import Limits, run_script
from tests.helpers import SCRIPT, make_data

ANALYSIS = (
    "Look at the data first.\n```python\n"
    'print("rows:", len(df))\n'  # df, target and numeric come from the head
    'corr = numeric.corrwith(df[target]).abs().sort_values(ascending=False)\n'
    "for col, value in corr.items():\n"
    '    print(f"corr {col} with y: {value:.3f}")\n'
    'print("skew y:", round(float(df["y"].skew()), 2))\n'
    'df[target].count()\n'  # notebook style: a bare expression shows its value
    "```\n"
)
BROKEN = "```python\nprint(undefined_frame.shape)\n```\n"
BROKEN_AGAIN = "```python\ndf = pd.read_csv('input/nope.csv')\nprint(df)\n```\n"


def _run(tmp: Path, analyze: list[str], *extra: str) -> Path:
    make_data(tmp / "train.csv")
    script = json.loads(SCRIPT.read_text())
    script["analyze"] = analyze
    (tmp / "replies.json").write_text(json.dumps(script))
    # Two folds, not five: a written node runs once per fold, and the analysis step does not
    # depend on how many.
    (tmp / "task.yaml").write_text(
        "data: train.csv\ntarget: y\nllm: scripted:replies.json\nnum_drafts: 2\n"
        "debug_prob: 1.0\nexecutors: 1\nbudget: 5m\nquiet: true\nexec_timeout: 120\n"
        "baseline: false\nanalyst: true\nfloor: false\nensemble: false\nfolds: 2\n"
    )
    out = tmp / "runs"
    assert main(["--task", str(tmp / "task.yaml"), "--out", str(out), *extra]) == 0
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    return run


def _rows_seen(run: Path) -> str:
    """The analysis explores the rows fold 0 learns from (the train split on the holdout)."""
    folds = RunStore.open(run).load_folds()
    assert folds is not None
    return f"rows: {len(folds.learn_rows(0))}"


def _user_prompt(row: pd.Series) -> str:
    messages = json.loads(row.prompt)
    return next(m["content"] for m in messages if m["role"] == "user")


def test_analysis_script_runs_in_the_sandbox(tmp_path: Path) -> None:
    make_data(tmp_path / "train.csv")
    task = prepare_task(TaskSpec(tmp_path / "train.csv", "y", None, None, ""))
    parsed = parse_analysis(ANALYSIS, task_context(task, 0))
    assert parsed.problem == ""
    result = run_script(parsed.code, task.inputs(), Limits(wall_seconds=60))
    assert result.status == "ok", result.stderr_tail
    assert result.valid_csv is None  # an analysis writes no submission, and needs none
    facts = trim_findings(result.stdout_tail)
    assert facts.splitlines()[0] == f"rows: {len(task.train)}"
    assert facts.splitlines()[-1] == str(len(task.train))
    # y = 3 a^2 + b: b is linearly correlated with y, c is noise.
    corr = {line.split()[1]: float(line.split()[-1]) for line in facts.splitlines()
            if line.startswith("corr")}
    assert corr["b"] > corr["c"]


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_findings_join_every_later_prompt_and_survive_resume(tmp_path: Path) -> None:
    # Two LLM slots: a draft could be generated beside the analysis, and must not be.
    run = _run(tmp_path, [ANALYSIS], "--max-nodes", "4", "--llm-concurrency", "2")
    rows = pd.read_parquet(run / "nodes").sort_values("step")
    (analysis,) = rows[rows.operator == "analyze"].itertuples()
    assert analysis.status == "ok" and analysis.step == 0 and pd.isna(analysis.metric)
    assert _rows_seen(run) in analysis.stdout_tail and analysis.reply == ANALYSIS
    assert "input/train.csv" in analysis.code
    findings = trim_findings(analysis.stdout_tail)
    later = rows[rows.operator != "analyze"]
    assert len(later) == 3
    for row in later.itertuples():
        assert f"# Data analysis (facts an exploration script printed)\n{findings}\n" in \
            _user_prompt(row), row.operator
        assert row.created_at >= analysis.finished_at  # nothing was generated before it
    prefixes = {_user_prompt(r).split("# Your job")[0].split("# Model code")[0]
                .split("# Current model code")[0] for r in later.itertuples()}
    assert len(prefixes) == 1  # one stable prefix for every later prompt
    summary = (run / "summary.md").read_text()
    assert f"## Data analysis (in every later prompt)\n\n```\n{findings}\n```" in summary

    assert main(["--resume", str(run), "--max-nodes", "6", "--budget", "5m", "--quiet"]) == 0
    rows = pd.read_parquet(run / "nodes")
    assert (rows.operator == "analyze").sum() == 1  # not run again
    new = rows[rows.step >= 4]
    assert len(new) == 2
    assert all(findings in _user_prompt(r) for r in new.itertuples())


@pytest.mark.slow  # whole searches, over 20 s: the slow step
@pytest.mark.parametrize("second", [ANALYSIS, BROKEN_AGAIN])
def test_failed_analysis_gets_one_retry_then_the_search_goes_on(tmp_path: Path,
                                                                 second: str) -> None:
    run = _run(tmp_path, [BROKEN, second], "--max-nodes", "4")
    rows = pd.read_parquet(run / "nodes").sort_values("step")
    analyses = rows[rows.operator == "analyze"]
    assert len(analyses) == 2
    first, retry = analyses.itertuples()
    assert first.status == "buggy" and "NameError" in first.error
    assert retry.parent_id == first.node_id
    assert "Analysis script that failed" in _user_prompt(retry) and "NameError" in \
        _user_prompt(retry)
    others = rows[rows.operator != "analyze"]
    assert len(others) == 2 and (others.status == "ok").any()  # the search went on
    if second == ANALYSIS:
        assert retry.status == "ok"
        assert all(_rows_seen(run) in _user_prompt(r) for r in others.itertuples())
    else:
        assert retry.status == "buggy"
        assert not any("Data analysis" in _user_prompt(r) for r in others.itertuples())
        summary = (run / "summary.md").read_text()
        assert "failed 2x (last: FileNotFoundError" in summary
        assert "the search went on without findings" in summary


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_analysis_cut_by_the_deadline_is_run_once_on_resume(tmp_path: Path) -> None:
    slow = "```python\nimport time\ntime.sleep(300)\nprint('never')\n```\n"
    run = _run(tmp_path, [slow], "--budget", "20s")
    rows = pd.read_parquet(run / "nodes")
    (cut,) = rows.itertuples()  # every draft waited for the analysis
    assert cut.operator == "analyze" and cut.status == "killed"
    assert len(list((run / "inflight").glob("*.json"))) == 1
    script = json.loads((tmp_path / "replies.json").read_text())
    script["analyze"] = [ANALYSIS]
    (tmp_path / "replies.json").write_text(json.dumps(script))
    assert main(["--resume", str(run), "--max-nodes", "4", "--budget", "5m", "--quiet"]) == 0
    rows = pd.read_parquet(run / "nodes").sort_values("step")
    analyses = rows[rows.operator == "analyze"]
    assert list(analyses.status) == ["killed", "ok"]  # re-proposed once, not twice
    later = rows[rows.operator != "analyze"]
    assert len(later) == 2
    assert all(_rows_seen(run) in _user_prompt(r) for r in later.itertuples())
