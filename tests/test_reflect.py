"""--reflect through the real engine (only the LLM is scripted): before each debug and improve
step one reflection call, whose text is stored with the node and sits in the step's prompt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

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
