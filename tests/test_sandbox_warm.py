"""Warm runs against real bubblewrap and real processes: a run forked from a session that
imported its modules gives what a fresh sandbox gives, leaves nothing to the next run, and a
failure is a status, a hang or a death a new session for the next run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from actors.workers import _ExecutorWorker
from sandbox import Limits, WarmRunner, run_script
from sandbox._workdirs import sweep_orphans
from search.families import WARM_MODULES
from tests.helpers import processes_with

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
PROJECT_ROOT = Path(__file__).resolve().parents[1]
LIMITS = Limits(wall_seconds=30)

# Reads its input, prints, writes every submission file the engine reads back, and says
# whether the project (the hidden labels' side of the sandbox) is visible.
SCRIPT = textwrap.dedent(f"""
    import os
    import pandas as pd
    rows = pd.read_csv("input/train.csv")
    print("rows", len(rows), "project visible",
          os.path.exists({str(PROJECT_ROOT / "pyproject.toml")!r}))
    os.makedirs("submission", exist_ok=True)
    rows.assign(p=rows.a * 2).to_csv("submission/valid.csv", index=False)
    rows.to_csv("submission/test.csv", index=False)
    with open("submission/fitted.pkl", "wb") as file:
        file.write(b"state")
""")
INPUTS = {"train.csv": b"a,b\n1,2\n3,4\n"}


@pytest.fixture
def runner():
    warm = WarmRunner()
    yield warm
    warm.close()


@needs_bwrap
def test_a_warm_run_gives_what_a_fresh_sandbox_gives(runner: WarmRunner) -> None:
    cold = run_script(SCRIPT, INPUTS, LIMITS)
    for _ in range(2):  # the first starts the session, the second is forked from it
        warm = runner.run(SCRIPT, INPUTS, LIMITS, ("pandas",))
        assert warm.status == cold.status == "ok" and warm.isolation == cold.isolation == "bwrap"
        assert warm.stdout_tail == cold.stdout_tail == "rows 2 project visible False\n"
        assert (warm.valid_csv, warm.test_csv, warm.fitted) == (
            cold.valid_csv, cold.test_csv, cold.fitted)
        assert warm.valid_csv == b"a,b,p\n1,2,2\n3,4,6\n"


@needs_bwrap
def test_nothing_of_a_run_reaches_the_next(runner: WarmRunner) -> None:
    marker = uuid.uuid4().hex
    first = textwrap.dedent(f"""
        import json, os, subprocess, sys
        json.LEAKED = 1  # a patched module
        os.environ["LEAKED"] = "1"
        open("left.txt", "w").write("x")
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # {marker}"])
        print(os.getcwd())
    """)
    second = textwrap.dedent("""
        import json, os
        print(hasattr(json, "LEAKED"), "LEAKED" in os.environ, os.path.exists("left.txt"),
              os.getcwd())
    """)
    ran = runner.run(first, {}, LIMITS, ("json",))
    assert ran.status == "ok" and not processes_with(marker)  # its process group went with it
    then = runner.run(second, {}, LIMITS, ("json",))
    leaked, env, left, cwd = then.stdout_tail.split()
    assert (leaked, env, left) == ("False", "False", "False")
    assert cwd != ran.stdout_tail.strip()  # a folder of its own
    assert not Path(cwd).exists() and not Path(ran.stdout_tail.strip()).exists()


@needs_bwrap
def test_failures_are_statuses_and_a_hang_restarts_the_session(runner: WarmRunner) -> None:
    failed = runner.run("x = 1\nraise ValueError('no such rows')\n", {}, LIMITS, ())
    assert failed.status == "buggy" and failed.exit_code == 1
    assert failed.error == "ValueError: no such rows (line 2: raise ValueError('no such rows'))"
    assert 'File "solution.py", line 2' in failed.stderr_tail
    exited = runner.run("import sys\nsys.exit(3)\n", {}, LIMITS, ())
    assert (exited.status, exited.exit_code) == ("buggy", 3)
    killed = runner.run("import os\nos.kill(os.getpid(), 9)\n", {}, LIMITS, ())
    assert (killed.status, killed.exit_code) == ("killed", -9)
    huge = runner.run("x = bytearray(16 * 2**30)\n", {}, LIMITS, ())
    assert huge.status == "oom"
    hung = runner.run("import time\ntime.sleep(600)\n", {}, Limits(wall_seconds=1), ())
    assert (hung.status, hung.exit_code) == ("timeout", None)
    assert runner.run(SCRIPT, INPUTS, LIMITS, ("pandas",)).status == "ok"  # a new session


@needs_bwrap
def test_the_modules_are_imported_before_the_run_and_other_ones_restart_it(
        runner: WarmRunner) -> None:
    probe = "import sys\nprint('decimal' in sys.modules, 'csv' in sys.modules)\n"
    assert run_script(probe, {}, LIMITS).stdout_tail == "False False\n"
    assert runner.run(probe, {}, LIMITS, ("decimal",)).stdout_tail == "True False\n"
    assert runner.run(probe, {}, LIMITS, ("decimal",)).stdout_tail == "True False\n"
    # another session, whose server imported csv and not decimal
    assert runner.run(probe, {}, LIMITS, ("csv",)).stdout_tail == "False True\n"


@needs_bwrap
def test_an_executor_runs_engine_code_warm_and_counts_its_memory() -> None:
    executor = _ExecutorWorker("exec-test")
    try:
        probe = "import sys\nprint('lightgbm' in sys.modules)\n"
        assert executor.run(probe, {}, LIMITS).result.stdout_tail == "False\n"
        assert executor.run(probe, {}, LIMITS, WARM_MODULES).result.stdout_tail == "True\n"
        big = "x = bytearray(300 * 2**20)\nx[::4096] = b'1' * len(x[::4096])\n"
        assert executor.run(big, {}, LIMITS, WARM_MODULES).result.status == "ok"
        assert executor.peak_candidate_bytes() >= 300 * 2**20
    finally:
        executor.warm.close()


# A process that runs one warm run and is then killed, as `ray.kill` kills an executor: its
# session's workdir is never removed by it.
_KILLED_EXECUTOR = textwrap.dedent("""
    import os, signal, sys
    from sandbox import Limits, WarmRunner
    runner = WarmRunner()
    result = runner.run("print('ran')", {}, Limits(wall_seconds=30), ())
    assert result.status == "ok", result
    print(runner._session.workdir, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


@needs_bwrap
def test_a_killed_executors_workdir_is_removed_by_the_next_sandbox(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(PROJECT_ROOT)}
    killed = subprocess.run([sys.executable, "-c", _KILLED_EXECUTOR], env=env, cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    orphan = Path(killed.stdout.strip())
    assert orphan.parent == temp and orphan.is_dir()
    nearby = temp / "sbx-not-a-workdir"
    nearby.mkdir()
    later = subprocess.run([sys.executable, "-c", "from sandbox import Limits, run_script; "
                            "print(run_script('print(1)', {}, Limits(wall_seconds=30)).status)"],
                           env=env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                           timeout=120)
    assert later.stdout.strip() == "ok", later.stderr
    assert not orphan.exists()
    assert sorted(p.name for p in temp.iterdir()) == [nearby.name]


def test_only_workdirs_whose_maker_ended_are_swept(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = int(ended.stdout)
    names = [f"sbx-{dead}-a", f"sbx-session-{dead}-b", f"sbx-{os.getpid()}-c", "sbx-x1-d"]
    for name in names:
        (tmp_path / name).mkdir()
    (tmp_path / f"sbx-{dead}-file").write_text("not a workdir")
    removed = sweep_orphans(tmp_path)
    assert sorted(p.name for p in removed) == names[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*names[2:], f"sbx-{dead}-file"])
