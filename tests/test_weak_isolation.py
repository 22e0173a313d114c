"""Without bubblewrap a candidate could read the run's hidden labels: engine.run refuses to
start unless that is accepted with --weak-isolation, which the manifest and summary then
record. (The isolation probe is replaced here; the sandbox's own fallbacks are tested in
tests/test_sandbox.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine.search_run as run_module
from engine.run import main
from tests.helpers import SCRIPT, make_data


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "isolation_mode", lambda: "rlimits")


def test_weak_isolation_is_refused_in_one_line(no_bwrap: None, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    make_data(tmp_path / "train.csv")
    out = tmp_path / "runs"
    argv = ["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm",
            f"scripted:{SCRIPT}", "--max-nodes", "1", "--folds", "1", "--out", str(out),
            "--quiet"]  # one node on the holdout: any run that starts will do
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: candidate scripts would run")
    assert "bubblewrap" in err and "--weak-isolation" in err
    assert not out.exists()  # nothing written

    assert main([*argv, "--weak-isolation"]) == 0
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["isolation"] == "rlimits" and manifest["config"]["weak_isolation"] is True
    summary = (run / "summary.md").read_text()
    assert "- isolation: rlimits, not bubblewrap: candidate scripts could read the hidden " \
           "labels (accepted with --weak-isolation)" in summary
