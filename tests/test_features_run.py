"""Feature programs through the whole engine (CLI -> Ray -> real sandbox -> store): a scripted
LLM writes a program that helps, one that reads the target, one that uses other rows and one
that changes nothing. Only the first is kept; each refusal says why before any model ran; the
answer applies the kept program, and engine.predict computes it for new rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.table import measure_run
from engine.predict import main as predict_main
from engine.records.runs import open_run
from engine.run import main
from engine.search_run import task_context
from engine.show import main as show_main
from operators.features import reported_importances
from operators.kinds import kind_of
from search.node import Operator, Status
from search.policy import Proposal
from search.programs import (
    GATE_PAIRS,
    PROGRAM_SHARE,
    REJECTED,
    gate_of,
    is_kept,
    program_counts,
)

HELPS = 'def add_features(df):\n    df["ab"] = df["a"] * df["b"]\n    return df\n'
TARGET = 'def add_features(df):\n    df["t"] = df["y"] + 1\n    return df\n'  # refused on its text
RANK = 'def add_features(df):\n    df["r"] = df["c"].rank()\n    return df\n'  # on the rows
COPY = 'def add_features(df):\n    df["c2"] = df["c"] + 0.0\n    return df\n'  # changes nothing
PROGRAMS = [HELPS, TARGET, RANK, COPY]  # COPY, the last, repeats while nodes are left


def _data(path: Path, rows: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a, b, c = rng.uniform(-2, 2, size=(3, rows))
    frame = pd.DataFrame({"a": a, "b": b, "c": c, "y": a * b + 0.05 * rng.normal(size=rows)})
    frame.to_csv(path, index=False)
    return frame


@pytest.mark.slow
def test_a_program_that_helps_is_kept_and_the_others_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _data(tmp_path / "train.csv")
    replies = {"features": [f"```python\n{p}```" for p in PROGRAMS]}
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    out = tmp_path / "runs"
    assert main(["--data", str(tmp_path / "train.csv"), "--target", "y",
                 "--llm", f"scripted:{tmp_path / 'replies.json'}", "--llm-writes", "features",
                 "--no-floor", "--no-ensemble", "--max-nodes", "6", "--budget", "4m",
                 "--folds", "3", "--executors", "2", "--quiet", "--out", str(out)]) == 0
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    run = open_run(run_dir)
    programs = sorted(run.journal.nodes_of(Operator.FEATURES), key=lambda n: n.step)
    by_reply = {n.reply.split("```python\n")[1].removesuffix("```"): n for n in programs}
    helps = by_reply[HELPS]
    assert is_kept(helps), helps.gate
    gate = gate_of(helps)
    assert gate is not None and gate.added == ("ab",) and gate.reference
    assert gate.pairs == len(GATE_PAIRS)  # judged on fresh pairs, not the reference's run
    # y is a * b: the model with the program relies on its column most; the next program's
    # prompt shows what the model of the latest scored program relied on
    assert next(iter(reported_importances(helps.stdout_tail))) == "ab", helps.stdout_tail
    latest = max((n for n in programs if n.is_ok), key=lambda n: n.step)
    ctx = task_context(run.store.load_task(), 0)
    top = next(c for c in reported_importances(latest.stdout_tail)
               if c in (*ctx.columns, "ab"))  # what a program on the kept `ab` gets
    prompt = kind_of(Operator.FEATURES).prompt(
        ctx, Proposal(Operator.FEATURES, helps.node_id, 0.7), run.journal)
    assert f"relied most on: {top} " in prompt.messages[-1]["content"]
    assert run.journal.get(gate.reference).operator is Operator.BASELINE
    assert helps.feature_set == helps.node_id and helps.parent_id is None
    target = by_reply[TARGET]
    assert target.status is Status.BUGGY and target.error.startswith(REJECTED)
    assert "target" in target.error and not target.runs.strip("[]")  # never ran
    rows = by_reply[RANK]
    assert rows.status is Status.BUGGY and rows.error.startswith(REJECTED)
    # one run of every fold, refused before any model was fitted
    assert "other rows" in rows.error and [r[0] for r in json.loads(rows.runs)] == [-1]
    copies = [n for n in programs if n.reply.endswith(f"{COPY}```") and n.is_ok]
    assert copies and not any(gate_of(n).kept for n in copies)  # type: ignore[union-attr]
    # Programs proposed once the first was kept build on it (the LLM answers at once here,
    # so the earlier ones were proposed on the columns as they are).
    later = [n for n in programs if n.created_at > helps.finished_at]
    assert all(n.parent_id == helps.node_id for n in later)
    counts = program_counts(run.journal)
    assert counts.kept == 1 and counts.rejected == 2
    # The answer is the kept program's node (confirmed over the baseline by a wide margin);
    # its solution applies the program, and engine.predict computes it for new rows.
    assert run.journal.final().node_id == helps.node_id
    assert "FEATURE_PROGRAMS" in (run_dir / "best" / "solution.py").read_text()
    # engine.show prints summary.md's feature-program section: the counts and the kept one.
    capsys.readouterr()
    assert show_main([str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert "Feature programs" in shown and "1 kept" in shown and helps.node_id in shown
    new = _data(tmp_path / "new.csv", rows=50, seed=1)
    assert predict_main([str(run_dir), str(tmp_path / "new.csv"), "-o",
                         str(tmp_path / "pred.csv")]) == 0
    predicted = pd.read_csv(tmp_path / "pred.csv")["prediction"].to_numpy()
    assert np.sqrt(np.mean((predicted - new["y"].to_numpy()) ** 2)) < 0.2


@pytest.mark.slow
def test_programs_that_never_pay_give_the_llms_cpu_to_an_executor(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--llm-patience 3: after three programs in a row not kept the LLM is asked for no more,
    its actor goes, and an executor on its CPU runs the floor's trials beside the first (a
    scripted LLM gets no spare executor there before: only the embedded model does)."""
    _data(tmp_path / "train.csv")
    failing = [f'def add_features(df):\n    raise ValueError("idea {i}")\n' for i in range(8)]
    replies = {"features": [f"```python\n{p}```" for p in failing]}
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    out = tmp_path / "runs"
    assert main(["--data", str(tmp_path / "train.csv"), "--target", "y",
                 "--llm", f"scripted:{tmp_path / 'replies.json'}", "--llm-writes", "features",
                 "--llm-patience", "3", "--max-nodes", "40", "--budget", "4m", "--folds", "3",
                 "--executors", "1", "--no-save-model", "--quiet", "--out", str(out)]) == 0
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    run = open_run(run_dir)
    spent = run.manifest["spent"]
    assert spent["llm_retired_why"] == "3 feature programs in a row were not kept"
    row = measure_run(run_dir)  # a benchmark's row of this run says so too
    assert (row["llm_retired_seconds"], row["llm_retired_why"]) == (
        spent["llm_retired_seconds"], spent["llm_retired_why"])
    programs = run.journal.nodes_of(Operator.FEATURES)
    assert row["program_exec_seconds"] == pytest.approx(sum(n.exec_seconds for n in programs))
    assert 0 < row["program_exec_seconds"] < row["exec_seconds"]
    retired = run.manifest["starts"][0]["at"] + spent["llm_retired_seconds"]
    assert len(programs) >= 3 and not any(is_kept(n) for n in programs)
    assert all(n.created_at <= retired for n in programs)  # none asked for after it
    # no program was asked for while the programs before it had taken more than their share
    # of the executors' seconds (search.programs.PROGRAM_SHARE)
    for program in programs:
        before = [n for n in run.journal if n.finished_at <= program.created_at]
        spent_on = sum(n.exec_seconds for n in before if n.operator is Operator.FEATURES)
        assert spent_on <= PROGRAM_SHARE * sum(n.exec_seconds for n in before), program
    later = [n for n in run.journal if n.created_at > retired]
    assert later and {n.executor for n in later if n.executor} == {"exec-0", "exec-c0"}, spent
    summary = (run_dir / "summary.md").read_text()
    assert "(3 feature programs in a row were not kept); its CPUs ran" in summary
    told = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("[") and "asked for no more" in line]  # the log's, not the summary's
    assert len(told) == 1 and "(3 feature programs in a row were not kept)" in told[0], told
