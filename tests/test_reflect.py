"""--reflect through the real engine (only the LLM is scripted): before each debug and improve
step one reflection call, whose text is stored with the node and sits in the step's prompt; and
the reflect benchmark's numbers, checked against the runs' own rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.reflect import main as bench_main
from benchmarks.reflect import step_success
from engine.run import main
from operators.replies import clean_reflection
from tests.helpers import make_data

GENERIC = Path(__file__).parent / "data" / "scripted_reflect.json"
# A buggy draft is always debugged; LLM-written nodes only, each scored on two folds (a
# written node runs once per fold; what is counted here does not depend on how many).
POLICY = "num_drafts: 2\ndebug_prob: 1.0\nfloor: false\nensemble: false\nfolds: 2\n"


def _user_prompt(prompt: str) -> str:
    return next(m["content"] for m in json.loads(prompt) if m["role"] == "user")


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_reflection_precedes_debug_and_improve(tmp_path: Path) -> None:
    make_data(tmp_path / "train.csv")
    shutil.copy(GENERIC, tmp_path / "replies.json")
    script = json.loads(GENERIC.read_text())
    reflections = {clean_reflection(t): t for t in script["reflect"]}
    (tmp_path / "task.yaml").write_text(POLICY)
    argv = ["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm",
            f"scripted:{tmp_path / 'replies.json'}", "--max-nodes", "5", "--executors", "1",
            "--no-baseline", "--reflect", "--out", str(tmp_path / "runs"), "--quiet",
            "--task", str(tmp_path / "task.yaml")]
    assert main(argv) == 0
    (run,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    rows = pd.read_parquet(run / "nodes")
    stepped = rows[rows.operator.isin(["debug", "improve"])]
    assert {"debug", "improve"} <= set(stepped.operator)
    for row in stepped.itertuples():
        assert row.reflection in reflections, row.reflection
        prompt = _user_prompt(row.prompt)
        assert f"# Your notes on this code\n{row.reflection}\n" in prompt
        # Two calls, both counted on the node: the scripted LLM counts words as tokens.
        said = len(reflections[row.reflection].split()) + len(row.reply.split())
        assert row.completion_tokens == said
        assert row.prompt_tokens > len(prompt.split())
    # The change an improve step reflected on is pinned as its hint and is the one it is asked
    # for, even if a sibling finished between the two calls.
    for row in stepped[stepped.operator == "improve"].itertuples():
        assert row.hint and f"ONE targeted change: {row.hint}." in _user_prompt(row.prompt)
    drafts = rows[rows.operator == "draft"]
    assert (drafts.reflection == "").all()
    assert (drafts.completion_tokens == drafts.reply.str.split().str.len()).all()
    assert not any("Your notes" in _user_prompt(p) for p in drafts.prompt)


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_reflect_benchmark_counts_steps_of_both_arms(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    (tmp_path / "task.yaml").write_text(POLICY)
    assert bench_main(["--suite", "concrete-strength", "--llm", f"scripted:{GENERIC}",
                       "--budget", "3m", "--out", str(out), "--max-nodes", "6",
                       "--executors", "1", "--task", str(tmp_path / "task.yaml")]) == 0
    results = json.loads((out / "reflect.json").read_text())
    assert [r["arm"] for r in results] == ["plain", "reflect"]
    for r in results:
        rows = pd.read_parquet(Path(r["run_dir"]) / "nodes")
        assert r["nodes"] == len(rows) == 6
        debugs = rows[rows.operator == "debug"]
        assert r["debugs"] == len(debugs) and r["debug_fixed"] == (debugs.status == "ok").sum()
        assert r["debugs"] >= 1 and r["improves"] >= 1
        assert (r["reflections"] > 0) == (r["arm"] == "reflect")
    table = (out / "reflect.md").read_text()
    assert "| **all** | | **plain** |" in table and "| **all** | | **reflect** |" in table
    # Run again: both runs are already there, so nothing new runs and the numbers stay.
    assert bench_main(["--suite", "concrete-strength", "--llm", f"scripted:{GENERIC}",
                       "--budget", "3m", "--out", str(out)]) == 0
    assert json.loads((out / "reflect.json").read_text()) == results
    assert len(list((out / "plain" / "concrete-strength").iterdir())) == 1
    assert bench_main(["--suite", "concrete-strength", "--budget", "5m", "--out", str(out)]) == 2


def test_step_success_leaves_out_stopped_steps() -> None:
    rows = pd.DataFrame([
        {"node_id": "p", "parent_id": None, "operator": "draft", "status": "ok", "metric": -5.0},
        {"node_id": "i1", "parent_id": "p", "operator": "improve", "status": "ok", "metric": -4.0},
        {"node_id": "i2", "parent_id": "p", "operator": "improve", "status": "ok", "metric": -6.0},
        {"node_id": "i3", "parent_id": "p", "operator": "improve", "status": "buggy",
         "metric": None},
        {"node_id": "i4", "parent_id": "p", "operator": "improve", "status": "killed",
         "metric": None},
        {"node_id": "d1", "parent_id": "i3", "operator": "debug", "status": "ok", "metric": -7.0},
        {"node_id": "d2", "parent_id": "i3", "operator": "debug", "status": "lost",
         "metric": None},
    ])
    assert step_success(rows) == {"drafts": 1, "drafts_ok": 1, "debugs": 1, "debug_fixed": 1,
                                  "improves": 3, "improved": 1}


def test_step_success_when_every_improve_was_stopped() -> None:
    rows = pd.DataFrame([
        {"node_id": "b", "parent_id": None, "operator": "baseline", "status": "ok", "metric": 0.8},
        {"node_id": "d", "parent_id": None, "operator": "draft", "status": "buggy", "metric": None},
        {"node_id": "i", "parent_id": "b", "operator": "improve", "status": "killed",
         "metric": None},
    ])
    assert step_success(rows) == {"drafts": 1, "drafts_ok": 0, "debugs": 0, "debug_fixed": 0,
                                  "improves": 0, "improved": 0}


ANALYSIS = "```python\ndf = pd.read_csv('input/train.csv')\nprint('rows:', len(df))\n```\n"


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_analyst_arm_runs_with_the_analyst_and_shares_the_plain_run(tmp_path: Path) -> None:
    script = json.loads(GENERIC.read_text())
    script["analyze"] = [ANALYSIS]
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(script))
    out = tmp_path / "bench"
    (tmp_path / "task.yaml").write_text(POLICY)
    common = ["--suite", "concrete-strength", "--llm", f"scripted:{replies}", "--budget", "3m",
              "--out", str(out), "--max-nodes", "5", "--executors", "1",
              "--task", str(tmp_path / "task.yaml")]
    assert bench_main([*common, "--arms", "plain"]) == 0
    assert bench_main([*common, "--arms", "plain,analyst"]) == 0
    results = json.loads((out / "reflect.json").read_text())
    assert [r["arm"] for r in results] == ["plain", "analyst"]
    for r in results:
        rows = pd.read_parquet(Path(r["run_dir"]) / "nodes")
        assert ((rows.operator == "analyze").sum() > 0) == (r["arm"] == "analyst")
        drafts = rows[rows.operator == "draft"]
        assert r["drafts"] == len(drafts) and r["drafts_ok"] == (drafts.status == "ok").sum()
    assert "| **all** | | **analyst** |" in (out / "reflect.md").read_text()


def test_an_unknown_arm_is_refused_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    assert bench_main(["--suite", "concrete-strength", "--arms", "plain,wizard",
                       "--out", str(out)]) == 2
    assert not out.exists()
