"""CLI on bad input: one line naming the problem and the fix, exit code 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.run import main


def _write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


GOOD = "a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40))


@pytest.mark.parametrize("case,args,needle", [
    ("missing file", ["--data", "{tmp}/nope.csv", "--target", "y"], "does not exist"),
    ("directory", ["--data", "{tmp}", "--target", "y"], "directory"),
    ("empty csv", ["--data", "{empty}", "--target", "y"], "empty"),
    ("header only", ["--data", "{header}", "--target", "y"], "no data rows"),
    ("missing target", ["--data", "{good}", "--target", "price"], "price"),
    ("one class", ["--data", "{oneclass}", "--target", "y"], "one"),
    ("unknown metric", ["--data", "{good}", "--target", "y", "--metric", "auc9"], "metric"),
    ("wrong metric", ["--data", "{good}", "--target", "y", "--metric", "rmse"], "rmse"),
    ("bad budget", ["--data", "{good}", "--target", "y", "--budget", "ten"], "budget"),
    ("negative budget", ["--data", "{good}", "--target", "y", "--budget=-1m"], "budget"),
    ("encoding", ["--data", "{latin}", "--target", "y"], "UTF-8"),
    ("unknown policy", ["--data", "{good}", "--target", "y", "--policy", "beam"], "policy"),
    ("no target", ["--data", "{good}"], "target"),
    ("bad yaml", ["--task", "{badyaml}"], "YAML"),
    ("request, missing csv", ["--task", "predict y from {tmp}/nope.csv"], "not a file"),
    # The words name no column, so the LLM is made: the missing scripted file is the error.
    ("request, no target", ["--task", "predict something from {good}"], "x.json not found"),
    ("request, wrong metric", ["--task", "predict y from {good}, minimise RMSE"], "rmse"),
])
def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                   args: list[str], needle: str) -> None:
    files = {
        "tmp": str(tmp_path),
        "empty": str(_write(tmp_path / "empty.csv", "")),
        "header": str(_write(tmp_path / "header.csv", "a,b,y\n")),
        "good": str(_write(tmp_path / "good.csv", GOOD)),
        "oneclass": str(_write(tmp_path / "one.csv", "a,y\n" + "1,x\n" * 30)),
        "latin": str(_write(tmp_path / "latin.csv",
                            b"a,y\n" + b"caf\xe9,1\n" * 20 + b"tea,0\n" * 20)),
        "badyaml": str(_write(tmp_path / "t.yaml", "data: [x\n")),
    }
    out = tmp_path / "runs"
    argv = [a.format(**files) for a in args] + ["--out", str(out), "--llm", "scripted:x.json"]
    assert main(argv) == 2, case
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert needle.lower() in err.lower(), err
    assert not out.exists() or not any(out.iterdir()), "bad input left files under runs/"
