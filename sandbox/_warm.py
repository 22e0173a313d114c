"""Warm runs: `WarmRunner.run(code, inputs, limits)` gives what `run_script` gives, without an
interpreter start and the imports on every run.

On small data a trial's fit takes a fraction of a second and importing numpy, pandas,
scikit-learn and LightGBM about 1.9 s (`python -X importtime`), so a fresh process per run
spends most of an executor's time starting. A runner keeps one confined process up (a
`Session`: the same isolation, rlimits and private uid as `run_script`) that imports the
modules it is given once and then forks a child per run. Each child starts from that state,
not from an earlier run's: a run's globals, patched modules and leftover processes (the
child's process group is killed when it ends) never reach the next run.

A run is a folder of the session's workdir, `jobs/<n>/`, laid out as `run_script` lays out its
workdir (`solution.py`, `input/`, `submission/`). The child runs `solution.py` there as
`__main__`, its stdout and stderr going to files of that folder; the runner reads the
submission, the outputs' tails and the exit status back the way `run_script` does and removes
the folder. A run past its time limit ends the session (everything of it is killed); the next
run starts a new one.

Only code the engine wrote runs here: a run shares its session's uid and `/tmp` with the runs
before it. Code an LLM wrote keeps a fresh sandbox per run (`run_script`).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from sandbox._runner import CLASSIFY_BYTES, _lay_out, current_plan, submission_files
from sandbox._session import REPLY_FD_ENV, Session
from sandbox._status import classify
from sandbox._types import ExecResult, Limits

JOBS = "jobs"
_STDOUT, _STDERR = ".stdout", ".stderr"

# The session's script. It imports PRELOAD (a module that fails to import is skipped: the run
# that needs it fails as it would in a fresh process), then serves each request, the name of a
# job folder, by forking a child that runs the folder's solution.py, and replies
# `done <n> <wait status> <the child's peak resident KiB>`.
_SERVER = '''
import builtins
import os
import signal
import sys
import time
import traceback
import types

for _name in __PRELOAD__:
    try:
        __import__(_name)
    except Exception:
        pass

_REPLY = int(os.environ[__REPLY_FD_ENV__])


def _child(folder):
    code = 1
    try:
        os.setpgid(0, 0)
        os.close(_REPLY)
        os.chdir(folder)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, name in ((1, __STDOUT__), (2, __STDERR__)):
            os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600),
                    fd)
        sys.argv = ["solution.py"]
        with open("solution.py", encoding="utf-8") as file:
            source = file.read()
        module = types.ModuleType("__main__")
        module.__file__, module.__builtins__ = "solution.py", builtins
        sys.modules["__main__"] = module
        try:
            exec(compile(source, "solution.py", "exec"), module.__dict__)
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
        except BaseException as exc:
            # from the script's own frame on, as `python solution.py` prints it
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _group_alive(pgid):
    """Whether a process of group `pgid` still runs (a zombie does not)."""
    try:
        os.killpg(pgid, 0)
    except OSError:  # no process left in it at all: the common case, without reading /proc
        return False
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat_file:
                    fields = stat_file.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


for _line in sys.stdin:
    _n = _line.strip()
    with open(f"input/request-{_n}.csv", encoding="utf-8") as _file:
        _folder = _file.read().strip()
    _pid = os.fork()
    if _pid == 0:
        _child(_folder)
    _, _status, _usage = os.wait4(_pid, 0)
    try:
        os.killpg(_pid, signal.SIGKILL)  # whatever the run started and left behind
    except OSError:
        pass
    # A signal lands when the process next runs: the reply waits until the group is gone
    # (a busy machine left a killed process running past the reply).
    _deadline = time.monotonic() + 2.0
    while _group_alive(_pid) and time.monotonic() < _deadline:
        time.sleep(0.001)
    os.write(_REPLY, f"done {_n} {_status} {_usage.ru_maxrss}\\n".encode())
'''


class WarmRunner:
    """One executor's warm session; started on the first run, restarted when a run needs other
    limits or modules, or after a run ended it."""

    def __init__(self) -> None:
        self._session: Session | None = None
        self._key: tuple[Limits, tuple[str, ...]] | None = None
        self._jobs = 0
        self.peak_bytes = 0  # the most resident memory one of its runs held

    def run(self, code: str, inputs: Mapping[str, bytes], limits: Limits,
            preload: Sequence[str]) -> ExecResult:
        """`code` run as `run_script` runs it, in a child of the session; raises
        SandboxError only when the session cannot be started."""
        session = self._ready(limits, tuple(preload))
        self._jobs += 1
        n = self._jobs
        folder = session.workdir / JOBS / str(n)
        folder.mkdir(parents=True)
        try:
            plan = current_plan()
            _lay_out(folder, code, inputs, plan, session.uid)
            if session.uid is not None:
                os.chown(folder.parent, session.uid, session.uid)
            line, seconds = session.ask(f"{JOBS}/{n}".encode(), limits.wall_seconds)
            if line == "":  # the session died under the run: its last words say why
                last = session.output_tail().strip().splitlines()[-1:] or ["no reply"]
                line = f"ended: {last[0]}"
            return self._result(code, folder, limits, line, seconds, session.isolation)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _ready(self, limits: Limits, preload: tuple[str, ...]) -> Session:
        key = (replace(limits, wall_seconds=1.0), preload)
        if self._session is not None and (not self._session.alive or key != self._key):
            self.close()
        if self._session is None:
            server = (_SERVER.replace("__PRELOAD__", repr(preload))
                      .replace("__REPLY_FD_ENV__", repr(REPLY_FD_ENV))
                      .replace("__STDOUT__", repr(_STDOUT)).replace("__STDERR__", repr(_STDERR)))
            self._session = Session(server, {}, limits)
            self._key = key
        return self._session

    def _result(self, code: str, folder: Path, limits: Limits, line: str | None,
                seconds: float, isolation: str) -> ExecResult:
        stdout = _tail(folder, _STDOUT, limits.output_bytes).decode("utf-8", errors="replace")
        stderr = _tail(folder, _STDERR, limits.output_bytes).decode("utf-8", errors="replace")
        word, _, status, peak = [*(line or "").split(), "", "", "", ""][:4]
        if word == "done" and status.lstrip("-").isdigit() and peak.isdigit():
            self.peak_bytes = max(self.peak_bytes, int(peak) * 1024)
            returncode: int | None = os.waitstatus_to_exitcode(int(status))
            timed_out = False
        else:  # past its time (the session was closed), or the session died under it
            returncode, timed_out = None, line is None
            if not timed_out:
                stderr += f"\nthe warm session {line}"
        kind, exit_code, error = classify(returncode, timed_out, stderr[-CLASSIFY_BYTES:],
                                          code, limits.wall_seconds)
        return ExecResult(
            status=kind, exit_code=exit_code,
            stdout_tail=stdout[-limits.tail_chars:], stderr_tail=stderr[-limits.tail_chars:],
            seconds=round(seconds, 3), error=error, isolation=isolation,
            **submission_files(folder),
        )  # fmt: skip

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
        self._session, self._key = None, None


def _tail(folder: Path, name: str, cap: int) -> bytes:
    """The last `cap` bytes of a file the run wrote in its folder; no link followed."""
    try:
        fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b""
        file.seek(max(0, info.st_size - cap))
        return file.read(cap)
