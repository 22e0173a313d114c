"""The sandbox against real bubblewrap and real processes: each test runs a hostile or
ordinary candidate and checks what the host sees afterwards."""

from __future__ import annotations

import shutil
import socket
import textwrap
import time
import uuid
import warnings
from pathlib import Path

import pytest

from sandbox import ExecResult, Limits, SandboxError, _runner, isolation_mode, run_script
from sandbox._isolation import RLIMITS, UNSHARE, Plan
from sandbox._status import classify
from tests.helpers import processes_with

HAVE_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap not installed")
PROJECT_ROOT = Path(__file__).resolve().parents[1]
INPUTS = {"train.csv": b"x,y\n1,0\n2,1\n", "valid.csv": b"x\n3\n", "test.csv": b"x\n4\n"}


def run(
    code: str,
    limits: Limits = Limits(wall_seconds=60),  # noqa: B008 - frozen, safe as a default
    workdir_root: Path | None = None,
    keep_workdir: bool = False,
) -> ExecResult:
    return run_script(
        textwrap.dedent(code), INPUTS, limits, workdir_root=workdir_root, keep_workdir=keep_workdir
    )


def spawn_code(marker: str, body: str) -> str:
    """Candidate lines that start `python -c body` tagged with marker (findable in /proc)."""
    return f"[sys.executable, '-c', {body!r} + '  # {marker}']"


@pytest.fixture
def marker() -> str:
    return f"sbxmark{uuid.uuid4().hex}"


@needs_bwrap
def test_ok_script_returns_submissions_under_bwrap() -> None:
    project_file = str(PROJECT_ROOT / "pyproject.toml")
    result = run(
        f"""
        import os
        import numpy, pandas, sklearn, lightgbm, optuna
        df = pandas.read_csv("input/train.csv")
        pandas.DataFrame({{"prediction": [1]}}).to_csv("submission/valid.csv", index=False)
        with open("submission/test.csv", "w") as fh:
            fh.write("prediction\\n0\\n")
        print("rows", len(df), "uid", os.getuid())
        print("project visible", os.path.exists({project_file!r}))
        """
    )
    assert result.status == "ok", result
    assert result.isolation == "bwrap" == isolation_mode()
    assert result.exit_code == 0 and result.error == ""
    assert result.valid_csv == b"prediction\n1\n"
    assert result.test_csv == b"prediction\n0\n"
    assert "rows 2" in result.stdout_tail
    assert "uid 0" not in result.stdout_tail  # the candidate runs unprivileged
    assert "project visible False" in result.stdout_tail


def test_buggy_script_reports_exception_and_line() -> None:
    result = run(
        """
        import pandas as pd
        df = pd.read_csv("input/train.csv")
        print("before")
        value = df["missing_column"]
        """
    )
    assert result.status == "buggy"
    assert result.exit_code == 1
    assert result.error.startswith("KeyError: 'missing_column'")
    assert '(line 5: value = df["missing_column"])' in result.error
    assert result.valid_csv is None and result.test_csv is None
    assert "before" in result.stdout_tail


@needs_bwrap
def test_network_is_blocked() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        result = run(
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
                print("CONNECTED")
            except OSError as exc:
                print("BLOCKED", exc)
            """
        )
        listener.settimeout(0.5)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert result.status == "ok", result
    assert "BLOCKED" in result.stdout_tail and "CONNECTED" not in result.stdout_tail


@needs_bwrap
def test_writes_outside_workdir_do_not_reach_host(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    host_tmp = Path("/tmp") / f"sbx-escape-{uuid.uuid4().hex}"
    result = run(
        f"""
        for path in ({str(outside)!r}, {str(host_tmp)!r}):
            try:
                with open(path, "w") as fh:
                    fh.write("escaped")
                print("WROTE", path)
            except OSError as exc:
                print("DENIED", path, exc)
        """,
        workdir_root=tmp_path / "work",
    )
    assert result.status == "ok", result
    assert not outside.exists()
    assert not host_tmp.exists()
    assert f"DENIED {outside}" in result.stdout_tail


@needs_bwrap
def test_hidden_labels_are_invisible(tmp_path: Path) -> None:
    secret = tmp_path / "runs" / "r1" / "task" / "labels.csv"
    secret.parent.mkdir(parents=True)
    secret.write_text("y\nSECRET-LABEL-42\n")
    secret.chmod(0o644)  # readable by anyone on the host: only the sandbox hides it
    result = run(
        f"""
        import os
        try:
            print("LEAK", open({str(secret)!r}).read())
        except OSError as exc:
            print("DENIED", type(exc).__name__)
        print("runs dir visible", os.path.exists({str(secret.parent.parent)!r}))
        # a symlink in the submission must not make the host read the file for us
        os.symlink({str(secret)!r}, "submission/valid.csv")
        """,
        workdir_root=tmp_path / "work",
    )
    assert result.status == "ok", result
    assert "SECRET-LABEL-42" not in result.stdout_tail
    assert "DENIED FileNotFoundError" in result.stdout_tail
    assert "runs dir visible False" in result.stdout_tail
    assert result.valid_csv is None


def test_timeout_kills_the_whole_group(marker: str) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"
    )
    start = time.monotonic()
    result = run(
        f"""
        import subprocess, sys, time
        subprocess.Popen({spawn_code(marker, stubborn)})
        print("child started", flush=True)
        time.sleep(1000)
        """,
        Limits(wall_seconds=2),
    )
    assert result.status == "timeout"
    assert result.error == "timed out after 2s"
    assert result.exit_code is None
    assert "child started" in result.stdout_tail
    assert time.monotonic() - start < 10
    assert processes_with(marker) == []


def test_daemonised_grandchild_does_not_outlive_the_run(marker: str) -> None:
    start = time.monotonic()
    result = run(
        f"""
        import os, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                argv = {spawn_code(marker, "import time; time.sleep(1000)")}
                os.execv(sys.executable, argv)  # keeps our stdout open
            os._exit(0)
        os.wait()
        print("parent done")
        """
    )
    assert result.status == "ok", result
    assert "parent done" in result.stdout_tail
    assert time.monotonic() - start < 10
    assert processes_with(marker) == []


@pytest.mark.parametrize(
    "allocation",
    ["bytearray(30 * 2**30)", "__import__('numpy').ones(4 * 2**30)"],
    ids=["bytearray", "numpy"],
)
def test_memory_limit_gives_oom(allocation: str) -> None:
    result = run(f"data = {allocation}\n", Limits(wall_seconds=60, memory_bytes=2**30))
    assert result.status == "oom", result
    assert result.error == "out of memory"


def test_process_cap_holds() -> None:
    result = run(
        """
        import os, time
        made = 0
        for _ in range(100):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(3)
                os._exit(0)
            made += 1
        print("forked", made)
        """,
        Limits(wall_seconds=60, max_processes=24),
    )
    assert result.status == "ok", result
    made = int(result.stdout_tail.split("forked")[1])
    assert 0 < made < 24


def test_fork_bomb_ends_and_leaves_nothing(marker: str) -> None:
    bomb = (
        "import os, time\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        time.sleep(0.001)\n"
    )
    start = time.monotonic()
    result = run(
        f"""
        import os, sys
        os.execv(sys.executable, {spawn_code(marker, bomb)})
        """,
        Limits(wall_seconds=5, max_processes=64),
    )
    assert result.status != "ok"
    assert time.monotonic() - start < 30
    assert processes_with(marker) == []


def test_huge_stdout_is_drained_and_bounded() -> None:
    result = run(
        """
        import sys
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.write(b"\\nEND\\n")
        """,
        Limits(wall_seconds=60, tail_chars=1000),
    )
    assert result.status == "ok", result
    assert len(result.stdout_tail) == 1000
    assert result.stdout_tail.endswith("xx\nEND\n")


def test_keep_workdir_keeps_the_layout(tmp_path: Path) -> None:
    run("print('hi')", workdir_root=tmp_path, keep_workdir=True)
    (workdir,) = tmp_path.iterdir()
    assert (workdir / "solution.py").read_text() == "print('hi')"
    assert sorted(p.name for p in (workdir / "input").iterdir()) == sorted(INPUTS)
    run("print('hi')", workdir_root=tmp_path / "gone")
    assert list((tmp_path / "gone").iterdir()) == []


@pytest.mark.parametrize("mode", [UNSHARE, RLIMITS])
def test_fallback_modes_run_and_confine(mode: str, marker: str) -> None:
    if mode == UNSHARE and shutil.which("unshare") is None:
        pytest.skip("unshare not installed")
    code = f"""
        import socket, subprocess, sys
        subprocess.Popen({spawn_code(marker, "import time; time.sleep(1000)")})
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=2).close()
        except OSError as exc:
            print("connect failed:", type(exc).__name__)
        open("submission/valid.csv", "w").write("prediction\\n1\\n")
        """
    result = _runner.execute(
        textwrap.dedent(code), INPUTS, Limits(wall_seconds=60), Plan(mode, False)
    )
    assert result.status == "ok", result
    assert result.isolation == mode
    assert result.valid_csv == b"prediction\n1\n"
    assert processes_with(marker) == []  # pid namespace (unshare) or process group died
    if mode == UNSHARE:
        assert "connect failed: OSError" in result.stdout_tail  # lo is down: unreachable


def test_probe_falls_back_and_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name)
    )
    monkeypatch.setattr(_runner, "_plan", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert isolation_mode() in (UNSHARE, RLIMITS)
        assert isolation_mode() in (UNSHARE, RLIMITS)
    weak = [w for w in caught if "WEAK" in str(w.message)]
    assert len(weak) == 1


def test_bad_input_name_is_our_error() -> None:
    with pytest.raises(SandboxError):
        run_script("print(1)", {"../escape.csv": b""})


@pytest.mark.parametrize(
    ("returncode", "timed_out", "stderr", "offset", "expected"),
    [
        (0, False, "MemoryError", None, ("ok", 0, "")),
        (None, True, "", None, ("timeout", None, "timed out after 30s")),
        (-9, False, "", None, ("killed", -9, "killed by signal 9")),
        (137, False, "", 128, ("killed", -9, "killed by signal 9")),
        (137, False, "", None, ("buggy", 137, "exit code 137")),
        (134, False, "terminate called after throwing an instance of 'std::bad_alloc'",
         128, ("oom", -6, "out of memory")),
        (1, False, "Traceback (most recent call last):\n  File \"/w/solution.py\", line 2, "
         "in <module>\n    1/0\nZeroDivisionError: division by zero\n", None,
         ("buggy", 1, "ZeroDivisionError: division by zero (line 2: 1/0)")),
        (2, False, "usage: oops\n", None, ("buggy", 2, "usage: oops")),
    ],
)  # fmt: skip
def test_classify(
    returncode: int | None,
    timed_out: bool,
    stderr: str,
    offset: int | None,
    expected: tuple[str, int | None, str],
) -> None:
    assert classify(returncode, timed_out, stderr, "import x\n1/0\n", 30.0, offset) == expected


def test_thread_limits_reach_the_candidate() -> None:
    code = "import os\nprint(os.environ['OMP_NUM_THREADS'], os.environ['OPENBLAS_NUM_THREADS'])\n"
    result = run_script(code, {}, Limits(wall_seconds=30, threads=3))
    assert result.status == "ok" and result.stdout_tail.split() == ["3", "3"]


def test_a_candidate_runs_at_least_as_nice_as_its_limits_say() -> None:
    """A spare executor's candidates (actors/workers.py) run at niceness 19, on what the LLM
    beside them leaves idle; by default a candidate keeps its executor's niceness."""
    import os

    code = "import os\nprint(os.nice(0))\n"
    spare = run_script(code, {}, Limits(wall_seconds=30, nice=19))
    assert spare.status == "ok" and spare.stdout_tail.split() == ["19"], spare.error
    plain = run_script(code, {}, Limits(wall_seconds=30))
    assert plain.status == "ok" and plain.stdout_tail.split() == [str(os.nice(0))]
    with pytest.raises(ValueError, match="nice must be 0 to 19"):
        Limits(nice=20)


@pytest.mark.parametrize("threads", [1, 2])
def test_lightgbm_sklearn_api_uses_the_executors_threads(threads: int) -> None:
    # LGBMModel(n_jobs=None) asks joblib for the physical cores and ignores OMP_NUM_THREADS:
    # on 2 cores beside llama.cpp that made LightGBM fits 10-40x slower.
    code = ("import lightgbm as lgb\nimport numpy as np\nfrom joblib import effective_n_jobs\n"
            "X, y = np.random.rand(50, 2), np.random.rand(50)\n"
            "fits = [lgb.LGBMRegressor(n_estimators=2, verbose=-1, n_jobs=n).fit(X, y)\n"
            "        for n in (None, -1)]\n"
            "print(*[m.booster_.params['num_threads'] for m in fits], effective_n_jobs(-1))\n")
    result = run_script(code, {}, Limits(wall_seconds=60, threads=threads))
    assert result.status == "ok", result.error
    assert result.stdout_tail.split() == [str(threads)] * 3
