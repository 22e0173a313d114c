"""`python -m engine.export sft`: fine-tuning pairs from a run made by the real engine (scripted
LLM), checked against the run's own rows: formats, successful steps only, --min-gain, errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.export import main
from engine.run import main as run_main
from operators.prompts import SYSTEM
from tests.helpers import make_data

GENERIC = Path(__file__).parent / "data" / "scripted_reflect.json"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("export")
    make_data(tmp / "train.csv")
    shutil.copy(GENERIC, tmp / "replies.json")
    (tmp / "task.yaml").write_text(
        "data: train.csv\ntarget: y\nllm: scripted:replies.json\nnum_drafts: 2\n"
        "debug_prob: 1.0\nmax_nodes: 7\nexecutors: 1\nbudget: 5m\nquiet: true\n"
        "exec_timeout: 120\nreflect: true\n"
        "folds: 1\n"  # the export reads prompts, replies and gains: the holdout shows them
    )
    assert run_main(["--task", str(tmp / "task.yaml"), "--out", str(tmp / "runs")]) == 0
    (run,) = [p for p in (tmp / "runs").iterdir() if not p.name.startswith(".")]
    return run


def expected(run: Path, min_gain: float = 0.0) -> dict[str, float | None]:
    """node id -> gain of every step the export must keep, computed from the rows alone."""
    rows = pd.read_parquet(run / "nodes").set_index("node_id")
    keep: dict[str, float | None] = {}
    for node_id, row in rows[rows.status == "ok"].iterrows():
        if row.operator in ("draft", "debug"):
            keep[str(node_id)] = None
        elif row.operator == "improve":
            gain = row.metric - rows.loc[row.parent_id, "metric"]
            if gain > 0 and gain >= min_gain:
                keep[str(node_id)] = gain
    return keep


def export(run: Path, out: Path, *flags: str) -> list[dict]:
    assert main(["sft", str(run), "-o", str(out), *flags]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_sharegpt_pairs_are_the_successful_steps(run_dir: Path, tmp_path: Path) -> None:
    lines = export(run_dir, tmp_path / "sft.jsonl")
    keep = expected(run_dir)
    assert {line["node_id"] for line in lines} == set(keep)
    operators = {line["operator"] for line in lines}
    assert {"draft", "debug", "improve"} <= operators  # the run has one of each
    rows = pd.read_parquet(run_dir / "nodes").set_index("node_id")
    for line in lines:
        row = rows.loc[line["node_id"]]
        system, human, gpt = line["conversations"]
        assert (system["from"], human["from"], gpt["from"]) == ("system", "human", "gpt")
        assert system["value"] == SYSTEM
        assert human["value"] == json.loads(row.prompt)[1]["content"]
        assert gpt["value"] == row.reply and "```python" in gpt["value"]
        assert line["run_id"] == run_dir.name and line["task"] == "train.csv: y (regression, rmse)"
        assert line["gain"] == pytest.approx(keep[line["node_id"]])
        assert line["reflected"] == (line["operator"] in ("debug", "improve"))
        if line["operator"] == "debug":
            assert rows.loc[row.parent_id, "status"] != "ok"
        if line["reflected"]:
            assert "# Your notes on this code" in human["value"]
    # The baseline has no prompt; failed steps and improves that lost are left out.
    assert not any(rows.loc[line["node_id"], "operator"] == "baseline" for line in lines)


def test_alpaca_and_messages_formats(run_dir: Path, tmp_path: Path) -> None:
    alpaca = export(run_dir, tmp_path / "a.jsonl", "--format", "alpaca")
    messages = export(run_dir, tmp_path / "m.jsonl", "--format", "messages")
    sharegpt = export(run_dir, tmp_path / "s.jsonl")
    assert len(alpaca) == len(messages) == len(sharegpt) > 0
    for a, m, s in zip(alpaca, messages, sharegpt, strict=True):
        assert a["node_id"] == m["node_id"] == s["node_id"]
        assert a["instruction"] == s["conversations"][1]["value"] and a["input"] == ""
        assert a["output"] == s["conversations"][2]["value"] and a["system"] == SYSTEM
        assert [x["role"] for x in m["messages"]] == ["system", "user", "assistant"]
        assert [x["content"] for x in m["messages"]] == [c["value"] for c in s["conversations"]]


def test_min_gain_filters_improves_only(run_dir: Path, tmp_path: Path) -> None:
    gains = sorted(g for g in expected(run_dir).values() if g is not None)
    assert gains, "the scripted run must have an improve that improved"
    high = export(run_dir, tmp_path / "high.jsonl", "--min-gain", str(gains[-1] + 1.0))
    assert not [line for line in high if line["operator"] == "improve"]
    assert {line["node_id"] for line in high} == set(expected(run_dir, gains[-1] + 1.0))
    assert {line["operator"] for line in high} >= {"draft", "debug"}
    just = export(run_dir, tmp_path / "just.jsonl", "--min-gain", str(gains[-1]))
    assert len([line for line in just if line["operator"] == "improve"]) == 1


def test_cli_in_a_subprocess(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    done = subprocess.run([sys.executable, "-m", "engine.export", "sft", str(run_dir), "-o",
                           str(out)], capture_output=True, text=True, check=True)
    assert done.stdout.startswith(f"wrote {len(expected(run_dir))} examples")
    assert "from 1 run(s)" in done.stdout
    assert len(out.read_text().splitlines()) == len(expected(run_dir))
    # A folder holding runs (as benchmarks leave them) is searched for them.
    nested = tmp_path / "bench" / "plain" / "task"
    shutil.copytree(run_dir, nested / run_dir.name)
    shutil.copytree(run_dir, nested / f".{run_dir.name}.partial")  # a half-made run: skipped
    assert main(["sft", str(tmp_path / "bench"), "-o", str(tmp_path / "b.jsonl")]) == 0
    assert len((tmp_path / "b.jsonl").read_text().splitlines()) == len(expected(run_dir))


def test_bad_input_is_one_line_and_writes_nothing(run_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sft.jsonl"
    cases = [
        ([], "no run directories"),
        ([str(tmp_path)], "is not a run directory"),
        ([str(run_dir), str(tmp_path / "missing")], "is not a run directory"),
    ]
    for runs, message in cases:
        assert main(["sft", *runs, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert main(["sft", str(run_dir), "-o", str(tmp_path / "no" / "sft.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_run_stored_before_prompts_were_recorded(run_dir: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    table = pq.read_table(old / "nodes")
    for name in ("reflection", "prompt", "reply"):  # the columns issue 9 added
        table = table.drop_columns(name)
    shutil.rmtree(old / "nodes")
    (old / "nodes").mkdir()
    pq.write_table(pa.Table.from_pandas(table.to_pandas(), preserve_index=False),
                   old / "nodes" / "chunk-000000-000006.parquet")
    out = tmp_path / "sft.jsonl"
    assert main(["sft", str(old), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{len(expected(run_dir))} without a stored prompt" in err and "nothing written" in err
    assert not out.exists() and not list(tmp_path.glob(".*"))
    # With a new run beside it, the old one's steps are skipped and counted.
    assert main(["sft", str(old), str(run_dir), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"skipped {len(expected(run_dir))} without a stored prompt" in said
    assert len(out.read_text().splitlines()) == len(expected(run_dir))
