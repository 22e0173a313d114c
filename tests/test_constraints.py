"""Constraints: which nodes are eligible as best, what the policies and the summary make of it,
and that a run stored before the measurement columns existed still reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.records.store import SCHEMA, RunStore
from engine.records.summary import summary_facts, write_summary
from engine.task.prepare import TaskSpec, prepare_task
from search.constraints import Constraints
from search.greedy import GreedyPolicy
from search.journal import Journal
from search.mcts import MCTSPolicy
from search.node import Node, Operator, Status
from tests.helpers import make_node

FAST = {"train_seconds": 1.0, "predict_ms_per_row": 0.05, "model_mb": 0.3}
SLOW = {"train_seconds": 1.0, "predict_ms_per_row": 12.0, "model_mb": 0.3}


def measured(node: Node, **values: float | None) -> Node:
    return replace(node, **values)


def test_violations_name_each_broken_limit() -> None:
    limits = Constraints(max_predict_ms_per_row=5, max_model_mb=1, max_train_seconds=10)
    ok = measured(make_node("a"), **FAST)
    assert limits.violations(ok) == []
    slow = measured(make_node("b"), predict_ms_per_row=12.0, model_mb=3.0, train_seconds=20.0)
    assert limits.violations(slow) == ["predicts in 12 ms per row > 5", "model is 3 MB > 1",
                                       "trains in 20 s > 10"]
    assert limits.describe() == ["predict <= 5 ms per row", "model <= 1 MB",
                                 "training <= 10 s"]


def test_unmeasured_counts_as_broken_but_training_falls_back_to_run_time() -> None:
    limits = Constraints(max_predict_ms_per_row=5, max_train_seconds=10)
    whole_script = make_node("w", exec_seconds=4.0)  # no harness: nothing measured
    assert limits.violations(whole_script) == ["prediction time not measured"]
    assert Constraints(max_train_seconds=3).violations(whole_script) == ["trains in 4 s > 3"]
    assert not Constraints() and Constraints(max_model_mb=1)


def test_from_mapping_reads_old_configs() -> None:
    assert Constraints.from_mapping({"budget": 60}) == Constraints()
    assert Constraints.from_mapping({"max_model_mb": 2, "max_train_seconds": None}) == \
        Constraints(max_model_mb=2.0)


def _journal(limits: Constraints) -> Journal:
    return Journal([
        measured(make_node("fast", metric=0.80), **FAST),
        measured(make_node("slow", metric=0.95, step=1), **SLOW),
        measured(make_node("mid", metric=0.85, step=2), **FAST),
        make_node("bad", status=Status.BUGGY, step=3),
    ], constraints=limits)


def test_best_skips_a_node_that_breaks_a_constraint() -> None:
    assert _journal(Constraints()).best().node_id == "slow"  # type: ignore[union-attr]
    journal = _journal(Constraints(max_predict_ms_per_row=5))
    best = journal.best()
    assert best is not None and best.node_id == "mid"
    assert [n.node_id for n in journal.eligible_nodes] == ["fast", "mid"]
    assert [(n.node_id, why) for n, why in journal.excluded_nodes] == [
        ("slow", ["predicts in 12 ms per row > 5"])]
    assert len(journal.good_nodes) == 3  # still ok nodes: improving them may meet the limit


def test_nothing_eligible_means_no_best() -> None:
    journal = Journal([measured(make_node("slow"), **SLOW)],
                      constraints=Constraints(max_predict_ms_per_row=1))
    assert journal.best() is None and journal.eligible_nodes == []


def test_greedy_improves_the_best_eligible_node() -> None:
    journal = _journal(Constraints(max_predict_ms_per_row=5))
    policy = GreedyPolicy(seed=0, num_drafts=3, debug_prob=0.0)
    (proposal,) = policy.propose(journal, 1, {})
    assert (proposal.operator, proposal.parent_id) == (Operator.IMPROVE, "mid")


def test_mcts_halves_the_reward_of_an_ineligible_node() -> None:
    def first(limits: Constraints) -> str | None:
        policy = MCTSPolicy(seed=0, num_drafts=3, exploration=0.01, widening_k=0.5)
        return policy.propose(_journal(limits), 1, {})[0].parent_id

    assert first(Constraints()) == "slow"
    assert first(Constraints(max_predict_ms_per_row=5)) == "mid"


def test_summary_lists_excluded_and_flagged_nodes(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("a,y\n" + "".join(f"{i},{i % 7 * 2.5}\n" for i in range(60)))
    task = prepare_task(TaskSpec(data, "y"))
    journal = _journal(Constraints(max_predict_ms_per_row=5))
    journal.add(replace(make_node("odd", metric=0.7, step=4), **FAST,
                        flags="perfect_valid_score,reads_outside_input",
                        code='open("/etc/hostname").read()\n'))
    facts = summary_facts(journal, {}, {})
    facts["request_warnings"] = ["the valid split has 12 rows: scores are noisy"]
    text = write_summary(tmp_path, task, journal, {}, facts).read_text()
    assert "constraints: predict <= 5 ms per row (1 ok nodes excluded)" in text
    assert "## Excluded by constraints" in text
    assert "| slow | draft | 0.95 | predicts in 12 ms per row > 5 |" in text
    assert "answer's valid rmse: 0.85 (node mid" in text
    assert "its cost: trains in 1 s, predicts in 0.05 ms per row, model 0.3 MB" in text
    assert "- request: the valid split has 12 rows" in text
    assert "| odd | ok | 0.7 | n/a | perfect_valid_score, reads_outside_input (/etc/hostname) |" \
        in text


def test_a_run_stored_before_the_new_columns_still_reads(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("a,y\n" + "".join(f"{i},{i * 2}\n" for i in range(30)))
    store = RunStore.create(tmp_path / "runs", prepare_task(TaskSpec(data, "y")), {"config": {}})
    new = {"train_seconds", "predict_ms_per_row", "model_mb", "train_metric_raw", "flags"}
    old = pa.schema([f for f in SCHEMA if f.name not in new])
    for i in range(2):
        row = {k: v for k, v in make_node(f"n{i}", step=i).to_record().items() if k in old.names}
        pq.write_table(pa.Table.from_pylist([{**row, "test_metric_raw": 0.5}], schema=old),
                       store.nodes_dir / f"part-{i:06d}-n{i}.parquet")
    store.append(measured(make_node("n2", step=2), **FAST), 0.5)
    store.compact()  # old and new parts merge into one chunk
    nodes, _ = store.read_nodes()
    assert [n.flags for n in nodes] == ["", "", ""]
    assert [n.predict_ms_per_row for n in nodes] == [None, None, pytest.approx(0.05)]
