"""What a run leaves behind: good/, tree.html, plots/, summary.md and `engine.show`.

One real scripted run (CLI -> Ray -> sandbox -> Parquet) is shared by this module and by
test_predict / test_tree_html_browser through `scripted_run`; small hand-made stores cover the
edge cases (no nodes, nothing ok, code that tries to break out of the embedded JSON).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pytest

from engine.records.outputs import embed_json, write_outputs, write_tree_html
from engine.records.store import RunStore
from engine.run import main as run_main
from engine.show import main as show_main
from engine.task.prepare import TaskSpec, prepare_task
from search.journal import Journal
from search.node import Status
from tests.helpers import make_data, make_node

SCRIPT = Path(__file__).parent / "data" / "scripted_regression.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("best_over_time.png", "nodes_by_status.png", "timeline.png")
# Code no browser may read as markup: it closes the data block and opens a script.
NASTY_CODE = 'print("</script><script>alert(1)</script><!-- & \u2028 done")\n'

_shared: dict[str, Path] = {}


def scripted_run(factory: pytest.TempPathFactory) -> Path:
    """One real run for the whole session (about 55 s alone): baseline, drafts, a debug,
    improves."""
    if "run" not in _shared:
        tmp = factory.mktemp("outputs")
        make_data(tmp / "train.csv")
        shutil.copy(SCRIPT, tmp / "replies.json")
        (tmp / "task.yaml").write_text(
            "data: train.csv\ntarget: y\nllm: scripted:replies.json\nnum_drafts: 2\n"
            "debug_prob: 1.0\nmax_nodes: 7\nexecutors: 1\nbudget: 5m\nquiet: true\n"
            "exec_timeout: 120\nfloor: false\nensemble: false\n"
            # Two folds, not five: a written node runs once per fold, and what these files
            # check of the folds (one model and training set per fold) two folds show.
            "folds: 2\n"
        )
        assert run_main(["--task", str(tmp / "task.yaml"), "--out", str(tmp / "runs")]) == 0
        (run,) = [p for p in (tmp / "runs").iterdir() if not p.name.startswith(".")]
        write_outputs(run)  # idempotent: harmless if engine.run already wrote them
        _shared["run"] = run
    return _shared["run"]


def small_store(tmp: Path, nodes: list, tests: dict[str, float] | None = None) -> Path:
    """A run directory holding exactly `nodes`, without running anything."""
    make_data(tmp / "d.csv", rows=40)
    task = prepare_task(TaskSpec(data=tmp / "d.csv", target="y"))
    store = RunStore.create(tmp / "runs", task, {
        "config": {}, "target": task.target, "task_type": task.task_type,
        "metric": task.metric.name,
    })
    for node in nodes:
        store.append(node, (tests or {}).get(node.node_id))
    return store.root


def embedded_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', html,
                      re.S)
    assert match, "no embedded run data"
    return dict(json.loads(match.group(1)))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_run(tmp_path_factory)


@pytest.fixture(scope="module")
def journal(run_dir: Path) -> Journal:
    nodes, _ = RunStore.open(run_dir).read_nodes()
    return Journal(nodes)


def test_good_holds_distinct_solutions_best_first(run_dir: Path, journal: Journal) -> None:
    folders = sorted((run_dir / "good").iterdir(), key=lambda p: int(p.name.split("-")[0]))
    distinct_ok = {n.code_hash for n in journal.good_nodes}
    assert len(folders) == min(5, len(distinct_ok)) >= 2
    metas = [json.loads((f / "node.json").read_text()) for f in folders]
    assert [m["rank"] for m in metas] == list(range(1, len(metas) + 1))
    metrics = [m["metric_raw"] for m in metas]
    assert metrics == sorted(metrics)  # rmse: lower first
    codes = [(f / "solution.py").read_text() for f in folders]
    assert len(set(codes)) == len(codes)
    for folder, meta, code in zip(folders, metas, codes, strict=True):
        node = journal.get(meta["node_id"])
        assert folder.name == f"{meta['rank']}-{node.node_id}"
        assert code == node.code and node.is_ok
        assert meta["operator"] == node.operator.value and meta["plan"] == node.plan
    best = journal.best()
    assert best is not None and metas[0]["node_id"] == best.node_id


def test_tree_html_is_self_contained_and_holds_every_node(run_dir: Path,
                                                          journal: Journal) -> None:
    html = (run_dir / "tree.html").read_text()
    data = embedded_data(html)
    page = re.sub(r'<script type="application/json".*?</script>', "", html, flags=re.S)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script src" not in page and 'rel="stylesheet"' not in page
    assert "@import" not in page and "url(" not in page and "fetch(" not in page
    assert {n["id"] for n in data["nodes"]} == {n.node_id for n in journal}
    best = journal.best()
    assert best is not None
    assert data["best"] == best.node_id and data["best_path"][-1] == best.node_id
    assert data["best_path"] == [n.node_id for n in journal.ancestors(best.node_id)]
    assert data["metric"] == "rmse" and data["maximize"] is False
    for record in data["nodes"]:
        node = journal.get(record["id"])
        assert record["code"] == node.code and record["status"] == node.status.value
        assert not any("test" in key for key in record)  # valid metric only, never test


def test_plots_are_real_pngs(run_dir: Path) -> None:
    for name in PLOTS:
        data = (run_dir / "plots" / name).read_bytes()
        assert data[:8] == PNG_MAGIC, name
        assert len(data) > 10_000, f"{name} is only {len(data)} bytes"


def test_summary_is_one_screen_and_names_every_output(run_dir: Path, journal: Journal) -> None:
    summary = (run_dir / "summary.md").read_text()
    lines = summary.splitlines()
    assert len(lines) <= 50
    for name in ("tree.html", "plots/", "good/", "best/solution.py", "nodes/*.parquet",
                 "engine.predict"):
        assert name in summary, name
    best = journal.best()
    assert best is not None
    for node in journal.ancestors(best.node_id):  # best path: operator and metric each step
        assert any(node.node_id in line and node.operator.value in line
                   and f"{node.metric_raw:.5g}" in line for line in lines)
    assert "## Top errors" in summary and "KeyError" in summary
    assert "its test rmse" in summary and "tokens" in summary and "budget" in summary


def test_parquet_is_the_source_of_truth(run_dir: Path, journal: Journal) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    spent = manifest["spent"]["nodes"]
    frame = pd.read_parquet(run_dir / "nodes")
    table = ds.dataset(str(run_dir / "nodes"), format="parquet").to_table()
    assert len(frame) == table.num_rows == spent == len(journal) == 7
    assert set(frame.node_id) == set(table.column("node_id").to_pylist()) == {
        n.node_id for n in journal}


def test_show_prints_the_summary_and_nodes(run_dir: Path, journal: Journal,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert show_main([str(run_dir), "--nodes"]) == 0
    out = capsys.readouterr().out
    best = journal.best()
    assert best is not None
    assert "Best path" in out and f"{best.metric_raw:.5g}" in out and "Top errors" in out
    assert "tree.html" in out and "good/" in out
    for node in journal:
        assert node.node_id in out


def test_show_refuses_a_non_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert show_main([str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_outputs_of_an_empty_run(tmp_path: Path) -> None:
    root = small_store(tmp_path, [])
    write_outputs(root)
    assert list((root / "good").iterdir()) == []
    data = embedded_data((root / "tree.html").read_text())
    assert data["nodes"] == [] and data["best"] is None
    for name in PLOTS:
        assert (root / "plots" / name).read_bytes()[:8] == PNG_MAGIC


def test_outputs_of_a_run_where_nothing_worked(tmp_path: Path) -> None:
    nodes = [make_node("a", status=Status.BUGGY, step=0),
             make_node("b", "a", status=Status.TIMEOUT, step=1),
             make_node("c", status=Status.LOST, step=2, code="")]
    root = small_store(tmp_path, nodes)
    write_outputs(root)
    assert list((root / "good").iterdir()) == []
    data = embedded_data((root / "tree.html").read_text())
    assert len(data["nodes"]) == 3 and data["best_path"] == []
    for name in PLOTS:
        assert (root / "plots" / name).read_bytes()[:8] == PNG_MAGIC


def test_good_skips_repeated_code_and_keeps_k(tmp_path: Path) -> None:
    nodes = [make_node(f"n{i}", step=i, metric=float(i)) for i in range(8)]
    nodes.append(replace(make_node("dup", step=8, metric=100.0), code=nodes[7].code,
                         code_hash=nodes[7].code_hash))  # the best, but n7's code again
    root = small_store(tmp_path, nodes)
    write_outputs(root)
    names = sorted(p.name for p in (root / "good").iterdir())
    assert names == ["1-dup", "2-n6", "3-n5", "4-n4", "5-n3"]


def test_embedded_json_survives_markup_in_code(tmp_path: Path) -> None:
    assert "<" not in embed_json({"code": NASTY_CODE})
    assert json.loads(embed_json({"code": NASTY_CODE})) == {"code": NASTY_CODE}
    root = small_store(tmp_path, [make_node("x", code=NASTY_CODE)])
    html = write_tree_html(root).read_text()
    assert html.count("</script>") == 2  # the data block's end and the code block's end
    (record,) = embedded_data(html)["nodes"]
    assert record["code"].startswith(NASTY_CODE)


def test_worker_time_counts_every_fold_run_on_its_executor() -> None:
    import json as _json

    from engine.records.summary import busy_shares, worker_spans
    from search.journal import Journal
    from search.node import Node, Operator, Status

    runs = [[0, "exec-0", 10.0, 2.0], [1, "exec-1", 12.0, 3.0], [2, "exec-0", 13.0, 1.0]]
    node = Node(node_id="a", parent_id=None, operator=Operator.DRAFT, status=Status.OK,
                llm_actor="llm-0", llm_seconds=8.0, created_at=5.0, finished_at=25.0,
                runs=_json.dumps(runs), executor="exec-0", exec_seconds=6.0)
    old = Node(node_id="b", parent_id=None, operator=Operator.DRAFT, status=Status.BUGGY,
               executor="exec-1", exec_seconds=1.0, created_at=15.0, finished_at=20.0)
    spans = worker_spans(Journal([node, old]))
    assert spans[("exec", "exec-0")] == [(10.0, 2.0, "ok"), (13.0, 1.0, "ok")]
    assert spans[("exec", "exec-1")] == [(12.0, 3.0, "ok"), (19.0, 1.0, "buggy")]
    assert busy_shares(Journal([node, old])) == {"llm-0": 0.4, "exec-0": 0.15, "exec-1": 0.2}
