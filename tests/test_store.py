"""The Parquet store: atomic parts, compaction, readers, in-flight notes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pytest

from engine.records.store import RunStore
from engine.task.prepare import TaskSpec, prepare_task
from search.node import Operator, Status
from search.policy import Proposal
from tests.helpers import make_node


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    data = tmp_path / "d.csv"
    data.write_text("a,y\n" + "".join(f"{i},{i * 2}\n" for i in range(30)))
    task = prepare_task(TaskSpec(data, "y"))
    return RunStore.create(tmp_path / "runs", task, {"config": {}})


def _fill(store: RunStore, n: int) -> None:
    for i in range(n):
        status = Status.OK if i % 3 else Status.BUGGY
        node = make_node(f"n{i}", None if i == 0 else "n0", status=status, metric=float(i),
                         step=i)
        store.append(node, test_metric_raw=float(i) if status is Status.OK else None)


def test_every_node_readable_by_pandas_pyarrow_and_store(store: RunStore) -> None:
    _fill(store, 7)
    store.compact()
    _fill_more = make_node("late", "n0", step=7)
    store.append(_fill_more, 1.0)
    assert len(pd.read_parquet(store.nodes_dir)) == 8
    assert ds.dataset(str(store.nodes_dir), format="parquet").to_table().num_rows == 8
    nodes, tests = store.read_nodes()
    assert [n.node_id for n in nodes] == [f"n{i}" for i in range(7)] + ["late"]
    assert tests["n0"] is None and tests["n1"] == 1.0
    assert nodes[0].metric is None and nodes[1].metric == 1.0  # NaN comes back as None
    assert nodes[3].status is Status.BUGGY and nodes[1].operator is Operator.IMPROVE


def test_compaction_crash_leaves_no_duplicates(store: RunStore) -> None:
    _fill(store, 5)
    parts = sorted(store.nodes_dir.glob("part-*.parquet"))
    saved = {p: p.read_bytes() for p in parts}
    store.compact()
    assert not list(store.nodes_dir.glob("part-*.parquet"))
    for path, data in saved.items():  # as if the driver died before deleting the parts
        path.write_bytes(data)
    nodes, _ = store.read_nodes()
    assert len(nodes) == 5 and len({n.node_id for n in nodes}) == 5


def test_half_written_part_is_ignored(store: RunStore) -> None:
    _fill(store, 2)
    (store.nodes_dir / ".part-000009-x.parquet.tmp").write_bytes(b"PAR1 torn")
    assert len(pd.read_parquet(store.nodes_dir)) == 2
    assert len(store.read_nodes()[0]) == 2


def test_in_flight_notes_round_trip(store: RunStore) -> None:
    store.mark_in_flight("a", Proposal(Operator.DRAFT, None, 0.7, idea="a forest"))
    store.mark_in_flight("b", Proposal(Operator.DEBUG, "n1", 0.9))
    store.clear_in_flight("a")
    assert store.take_in_flight() == [Proposal(Operator.DEBUG, "n1", 0.9)]
    assert store.take_in_flight() == []


def test_kept_fold_models_say_their_sizes_in_fold_order(store: RunStore) -> None:
    assert store.kept_fold_models() == {}
    states = [bytes(size) for size in (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5)]  # fold-10 after fold-9
    store.keep_fold_models("a", states)
    store.keep_fold_models("b", [b"xy"])
    assert store.kept_fold_models() == {"a": [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], "b": [2]}
    assert store.read_fold_models("a") == states
    store.drop_fold_models({"b"})
    assert store.kept_fold_models() == {"b": [2]}
