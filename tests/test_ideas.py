"""Which ideas a search asks the model for: with the engine's floor on, features only, and
ideas about text columns only for a task that has some."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from engine.task.prepare import TaskSpec, prepare_task
from search.greedy import GreedyPolicy
from search.ideas import TEXT_FEATURE_IDEAS, idea_pool
from search.journal import Journal
from search.node import Operator
from tests.helpers import make_data, make_node


def test_text_column_ideas_only_for_tasks_with_text_columns(tmp_path: Path) -> None:
    make_data(tmp_path / "numbers.csv", rows=100)
    task = prepare_task(TaskSpec(tmp_path / "numbers.csv", "y", None, None, ""))
    assert not task.has_text_features  # a, b, c: numbers only
    frame = pd.read_csv(io.BytesIO(task.split_files["train.csv"]))
    frame.assign(colour=["red", "blue"] * (len(frame) // 2)).to_csv(tmp_path / "t.csv",
                                                                      index=False)
    with_text = prepare_task(TaskSpec(tmp_path / "t.csv", "y", None, None, ""))
    assert with_text.has_text_features
    assert idea_pool(False, False) == "all"

    def asked(pool: str) -> set[str]:
        policy = GreedyPolicy(seed=0, num_drafts=0, debug_prob=0.0, ideas=pool)
        journal = Journal([make_node("root", metric=1.0)])
        ideas = set()
        for i in range(12):  # two rounds of the pool, by siblings counted
            [proposal] = policy.propose(journal, 1, {})
            assert proposal.operator is Operator.IMPROVE
            ideas.add(proposal.idea)
            journal.add(make_node(f"c{i}", "root", metric=0.5, step=i + 1))
        return ideas

    assert not asked(idea_pool(True, task.has_text_features)) & set(TEXT_FEATURE_IDEAS)
    assert set(TEXT_FEATURE_IDEAS) <= asked(idea_pool(True, with_text.has_text_features))
