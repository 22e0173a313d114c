"""A confined process that stays up between requests: `start_session(code, inputs, limits)`.

`run_script` pays an interpreter start, the imports and whatever the script loads on every
call. A session pays them once: the script starts confined exactly as `run_script` would
start it (same isolation, rlimits, private uid, workdir layout) and then serves requests
until it is closed. The protocol is the script's to follow:

- a request is one line, its number `n`, on the script's stdin, after the request's bytes
  were written to `input/request-<n>.csv`;
- the reply is one line on the file descriptor named by `REPLY_FD_ENV`: `ok <n>`, with the
  answer in `submission/reply-<n>/valid.csv`, or `error <one line>`;
- end of stdin means close.

The script's own output (stdout and stderr, one pipe) is drained all the time and its tail
kept for errors. A request that outlives its time limit, or a process that dies, ends the
session: everything of it is killed and its workdir removed, as `run_script` does after
every run.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox._isolation import build_argv, new_uid
from sandbox._runner import _environment, _lay_out, _read_submission, _sweep, _Tail, current_plan
from sandbox._types import Limits, SandboxError
from sandbox._workdirs import new_workdir

REPLY_FD_ENV = "TREEML_REPLY_FD"
REQUEST_FILE = "request-{n}.csv"  # under input/
REPLY_DIR = "reply-{n}"  # under submission/, holding valid.csv
_START_SECONDS = 60.0  # for the confinement to be set up (not for the script's own start)
_REPLY_LINE_CAP = 4096


@dataclass(frozen=True, slots=True)
class Reply:
    """One request's outcome: the reply's valid.csv, or why there is none."""

    csv: bytes | None
    error: str = ""
    seconds: float = 0.0


class Session:
    """One confined process serving requests, in order, until `close()`."""

    def __init__(self, code: str, inputs: Mapping[str, bytes], limits: Limits,
                 extra_ro_paths: Sequence[str | Path] = ()) -> None:
        plan = current_plan()
        self.isolation = plan.mode
        self._limits = limits
        self._uid = new_uid() if plan.own_uid else None
        self._count = 0
        self._closed = False
        self._lock = threading.Lock()
        self.workdir = new_workdir("session-")
        self._output = _Tail(limits.output_bytes)
        ready_r, ready_w = os.pipe()
        reply_r, reply_w = os.pipe()
        try:
            _lay_out(self.workdir, code, inputs, plan, self._uid)
            env = {**_environment(self.workdir, plan, limits.threads),
                   REPLY_FD_ENV: str(reply_w)}
            argv = build_argv(plan, self.workdir, limits, self._uid, ready_w, extra_ro_paths)
            self._proc = subprocess.Popen(
                argv, cwd=self.workdir, env=env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(ready_w, reply_w),
            )  # fmt: skip
        except BaseException:
            for fd in (ready_r, reply_r):
                os.close(fd)
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        finally:
            os.close(ready_w)
            os.close(reply_w)
        self._replies = reply_r
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        try:
            started = _wait_readable(ready_r, _START_SECONDS) and os.read(ready_r, 1) == b"1"
        finally:
            os.close(ready_r)
        if not started:
            last = self.output_tail().strip().splitlines()[-1:] or ["it never started"]
            self.close()
            raise SandboxError(f"sandbox session setup failed ({plan.mode}): {last[0]}")

    def _drain(self) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while data := os.read(fd, 1 << 16):
            self._output.feed(data)

    def output_tail(self) -> str:
        """The newest of what the script printed (stdout and stderr together)."""
        return self._output.text(self._limits.tail_chars)

    @property
    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None

    @property
    def uid(self) -> int | None:
        """The private uid the script runs as (None: it runs as ours)."""
        return self._uid

    def request(self, data: bytes, timeout: float | None = None) -> Reply:
        """Send `data` as the next request and wait for its reply (at most `timeout`
        seconds, default the session's wall limit; past it the session is closed)."""
        line, seconds, n = self._ask(data, timeout)
        if line is None:
            limit = self._limits.wall_seconds if timeout is None else timeout
            return Reply(None, f"no reply within {limit:.0f} s; the session was closed",
                         seconds)
        if line == "":
            return Reply(None, self._ended(), seconds)
        word, _, rest = line.partition(" ")
        if word == "ok" and rest == str(n):
            csv = _read_submission(self.workdir, "valid.csv",
                                   ("submission", REPLY_DIR.format(n=n)))
            return Reply(csv, "" if csv is not None else "the reply wrote no valid.csv",
                         seconds)
        return Reply(None, rest if word == "error" else f"malformed reply {line[:200]!r}",
                     seconds)

    def ask(self, data: bytes, timeout: float | None = None) -> tuple[str | None, float]:
        """`request` without reading a reply's files: the reply line as the script wrote it
        ("" when the session ended, None past the time limit, which closed it) and the
        seconds it took."""
        line, seconds, _ = self._ask(data, timeout)
        if line == "":
            self._ended()
        return line, seconds

    def _ask(self, data: bytes, timeout: float | None) -> tuple[str | None, float, int]:
        with self._lock:
            if not self.alive:
                return "", 0.0, 0
            self._count += 1
            n = self._count
            self._clear(n - 1)
            path = self.workdir / "input" / REQUEST_FILE.format(n=n)
            path.write_bytes(data)
            if self._uid is not None:
                os.chown(path, self._uid, self._uid)
            start = time.monotonic()
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(f"{n}\n".encode())
                self._proc.stdin.flush()
            except OSError:
                return "", 0.0, n
            limit = self._limits.wall_seconds if timeout is None else timeout
            line = self._read_line(start + limit)
            seconds = time.monotonic() - start
            if line is None:
                self.close()
            return line, seconds, n

    def _read_line(self, deadline: float) -> str | None:
        """The next reply line; "" when the script closed its end; None past the deadline."""
        buf = b""
        while not buf.endswith(b"\n"):
            if not _wait_readable(self._replies, deadline - time.monotonic()):
                return None
            chunk = os.read(self._replies, 1)
            if not chunk:
                return ""
            buf += chunk
            if len(buf) > _REPLY_LINE_CAP:
                break
        return buf.decode("utf-8", errors="replace").strip()

    def _ended(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=2)
        code = self._proc.returncode
        last = self.output_tail().strip().splitlines()[-1:] or [""]
        self.close()
        return f"the session ended (exit code {code}): {last[0]}".rstrip(": ")

    def _clear(self, n: int) -> None:
        if n >= 1:
            with contextlib.suppress(OSError):
                (self.workdir / "input" / REQUEST_FILE.format(n=n)).unlink()
            shutil.rmtree(self.workdir / "submission" / REPLY_DIR.format(n=n),
                          ignore_errors=True)

    def close(self) -> None:
        """End the process and everything it started; remove its workdir. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        _sweep(self._proc, self._uid)
        self._drainer.join(timeout=5)  # every writer is gone: the drain has read its end
        if self._proc.stdout is not None and not self._drainer.is_alive():
            self._proc.stdout.close()
        with contextlib.suppress(OSError):
            os.close(self._replies)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_session(code: str, inputs: Mapping[str, bytes],
                  limits: Limits = Limits(),  # noqa: B008 - frozen dataclass
                  extra_ro_paths: Sequence[str | Path] = ()) -> Session:
    """Start `code` confined as `run_script` would, to serve requests (module docstring)."""
    return Session(code, inputs, limits, extra_ro_paths)


def _wait_readable(fd: int, seconds: float) -> bool:
    if seconds <= 0:
        return False
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(seconds))
