"""Bad input beyond tests/test_cli.py: each case ends with exit code 2, one line naming the
problem and the fix, and nothing created under runs/ (for --resume: nothing changed in it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import engine.task.checks
from engine.records.store import RunStore
from engine.run import main
from engine.task.prepare import TaskSpec, prepare_task

GOOD = "a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40))


def _expect_user_error(argv: list[str], capsys: pytest.CaptureFixture[str], needle: str,
                       out: Path) -> None:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert needle.lower() in err.lower(), err
    assert not out.exists() or not any(out.iterdir()), "bad input left files under runs/"


def _files(tmp: Path) -> dict[str, str]:
    many = pd.DataFrame({"a": np.arange(20_000), "y": [f"c{i % 10_000}" for i in range(20_000)]})
    many.to_csv(tmp / "many.csv", index=False)
    texts = {
        "nan_target": "a,y\n" + "".join(f"{i},\n" for i in range(30)),
        "dup_cols": "a,a,y\n" + "".join(f"{i},{i},{i % 2}\n" for i in range(30)),
        "good": GOOD,
        "yaml_list": "- data: good.csv\n- target: y\n",
        "yaml_unknown": "data: good.csv\ntarget: y\nbudgett: 10m\n",
        "yaml_policy": "data: good.csv\ntarget: y\npolicy: beam\n",
        "yaml_budget": "data: good.csv\ntarget: y\nbudget: -5m\n",
        "yaml_llm_timeout": "data: good.csv\ntarget: y\nllm_timeout: 0\n",
        "yaml_tabs": "data: good.csv\n\ttarget: y\n",
    }
    names = {"nan_target": "nan.csv", "dup_cols": "dup.csv", "good": "good.csv"}
    out = {"tmp": str(tmp), "many": str(tmp / "many.csv")}
    for key, text in texts.items():
        path = tmp / names.get(key, f"{key}.yaml")
        path.write_text(text)
        out[key] = str(path)
    return out


@pytest.mark.parametrize("case,args,needle", [
    ("target all NaN", ["--data", "{nan_target}", "--target", "y"], "empty in every row"),
    ("10,000 classes", ["--data", "{many}", "--target", "y"], "classes"),
    ("duplicate columns", ["--data", "{dup_cols}", "--target", "y"], "duplicate column"),
    ("yaml is a list", ["--task", "{yaml_list}"], "mapping"),
    ("yaml unknown key", ["--task", "{yaml_unknown}"], "budgett"),
    ("yaml unknown policy", ["--task", "{yaml_policy}"], "policy"),
    ("yaml negative budget", ["--task", "{yaml_budget}"], "budget"),
    ("yaml zero llm_timeout", ["--task", "{yaml_llm_timeout}"], "llm_timeout"),
    ("yaml bad indentation", ["--task", "{yaml_tabs}"], "YAML"),
    ("missing task file", ["--task", "{tmp}/nope.yaml"], "nope.yaml"),
    ("zero max nodes", ["--data", "{good}", "--target", "y", "--max-nodes", "0"], "max-nodes"),
    ("zero executors", ["--data", "{good}", "--target", "y", "--executors", "0"], "executors"),
    ("zero exec timeout", ["--data", "{good}", "--target", "y", "--exec-timeout", "0"],
     "exec-timeout"),
    ("unknown llm", ["--data", "{good}", "--target", "y", "--llm", "gpt9"], "llm"),
    ("unparsable budget", ["--data", "{good}", "--target", "y", "--budget", "1x"], "budget"),
    ("negative budget flag", ["--data", "{good}", "--target", "y", "--budget", "-5m"],
     "bad budget '-5m'"),
    ("not an int", ["--data", "{good}", "--target", "y", "--max-nodes", "many"], "max-nodes"),
    ("unknown flag", ["--data", "{good}", "--target", "y", "--budgett", "5m"], "--budgett"),
    ("missing test file", ["--data", "{good}", "--target", "y", "--test", "{tmp}/t.csv"],
     "does not exist"),
])
def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                   args: list[str], needle: str) -> None:
    files = _files(tmp_path)
    out = tmp_path / "runs"
    argv = [a.format(**files) for a in args] + ["--out", str(out)]
    if "--llm" not in argv:
        argv += ["--llm", "scripted:x.json"]
    _expect_user_error(argv, capsys, needle, out)


def test_file_over_the_size_guard(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The guard is checked from the file's size before reading: a small limit stands in for a
    # file over a twelfth of the machine's memory (writing one would cost minutes and disk).
    (tmp_path / "big.csv").write_text(GOOD * 50)
    monkeypatch.setattr(engine.task.checks, "MAX_DATA_BYTES", 1000)
    out = tmp_path / "runs"
    _expect_user_error(["--data", str(tmp_path / "big.csv"), "--target", "y", "--out", str(out),
                        "--llm", "scripted:x.json"], capsys, "memory can search", out)


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def _stored_run(tmp: Path) -> Path:
    """A run directory as `new_run` leaves it before its loop (no Ray needed)."""
    (tmp / "good.csv").write_text(GOOD)
    task = prepare_task(TaskSpec(tmp / "good.csv", "y"))
    store = RunStore.create(tmp / "runs", task, {
        "config": {"data": str(tmp / "good.csv"), "target": "y", "budget": 60.0},
        "starts": [], "spent": {},
    })
    return store.root


@pytest.mark.parametrize("case", ["not a run", "data changed", "manifest corrupt",
                                  "split deleted"])
def test_bad_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    run = _stored_run(tmp_path)
    target = run
    if case == "not a run":
        target = tmp_path
    elif case == "data changed":
        train = run / "task" / "train.csv"
        train.write_text(train.read_text().replace("\n1,", "\n7,", 1))
    elif case == "manifest corrupt":
        (run / "manifest.json").write_text("{not json")
    else:
        (run / "task" / "valid_labels.csv").unlink()
    before = _snapshot(tmp_path)
    assert main(["--resume", str(target), "--budget", "1m", "--llm", "scripted:x.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: cannot resume"), err
    assert _snapshot(tmp_path) == before, "a refused resume changed files"
