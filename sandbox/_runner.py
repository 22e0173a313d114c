"""run_script: lay out a fresh workdir, run the candidate confined, collect what it left.

One call is one process tree: it is started in its own session, read through non-blocking
pipes by a single selector loop (so endless output neither blocks it nor fills memory),
killed as a whole at the wall-clock limit, and swept away afterwards (pid namespace, process
group, and every process of the run's private uid).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from sandbox._isolation import (
    BWRAP,
    BWRAP_SIGNAL_OFFSET,
    RLIMITS,
    UNSHARE,
    Plan,
    build_argv,
    kill_uid,
    new_uid,
)
from sandbox._status import classify
from sandbox._types import ExecResult, Limits, SandboxError
from sandbox._workdirs import new_workdir

log = logging.getLogger(__name__)

SUBMISSION_CAP = 200 * 2**20  # a bigger submission is malformed anyway; never read it all
_DRAIN_GRACE = 2.0  # seconds to keep reading pipes after the candidate's end
_READ_CHUNK = 1 << 16
# stderr kept for classification: enough for a long pandas traceback, bounded by output_bytes.
CLASSIFY_BYTES = 1 << 16
# Thread-count variables set from Limits.threads: they keep BLAS/OpenMP from oversubscribing.
# LOKY_MAX_CPU_COUNT caps joblib's cpu_count(), which sets LightGBM's sklearn API threads
# (n_jobs=None: every physical core, OMP_NUM_THREADS ignored) and scikit-learn's n_jobs=-1.
# Without it a LightGBM fit beside a 1-thread llama.cpp on 2 cores ran 10-40x slower.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "LOKY_MAX_CPU_COUNT")  # fmt: skip

_plan_lock = threading.Lock()
_plan: Plan | None = None


def run_script(
    code: str,
    inputs: Mapping[str, bytes],
    limits: Limits = Limits(),  # noqa: B008 - frozen dataclass, safe as a default
    *,
    workdir_root: str | Path | None = None,
    keep_workdir: bool = False,
    extra_ro_paths: Sequence[str | Path] = (),
) -> ExecResult:
    """Run `code` as solution.py next to `input/<name>` files; never raises for the candidate.

    Raises SandboxError only when the sandbox itself cannot be set up.
    """
    return execute(
        code, inputs, limits, current_plan(),
        workdir_root=workdir_root, keep_workdir=keep_workdir, extra_ro_paths=extra_ro_paths,
    )  # fmt: skip


def isolation_mode() -> str:
    """The isolation run_script uses here: "bwrap", "unshare" or "rlimits" (probed once)."""
    return current_plan().mode


def current_plan() -> Plan:
    global _plan
    with _plan_lock:
        if _plan is None:
            _plan = _probe()
        return _plan


def _probe() -> Plan:
    """Pick the strongest launch method that really runs our interpreter on this machine."""
    root = os.geteuid() == 0
    candidates = [Plan(BWRAP, root)]
    for mode in (UNSHARE, RLIMITS):
        # Our own uid needs the interpreter readable by a stranger (e.g. not under /root).
        candidates += [Plan(mode, True), Plan(mode, False)] if root else [Plan(mode, False)]
    failures: list[str] = []
    for plan in candidates:
        if plan.mode == BWRAP and shutil.which("bwrap") is None:
            failures.append("bwrap: not installed")
            continue
        if plan.mode == UNSHARE and shutil.which("unshare") is None:
            failures.append("unshare: not installed")
            continue
        try:
            result = execute("import sys\n", {}, Limits(wall_seconds=60.0), plan)
        except (SandboxError, OSError) as exc:
            failures.append(f"{plan.mode}: {exc}")
            continue
        if result.status == "ok":
            _warn_if_weak(plan, failures)
            return plan
        failures.append(f"{plan.mode}: {result.error or result.status}")
    raise SandboxError("no isolation mode works here: " + "; ".join(failures))


def _warn_if_weak(plan: Plan, failures: list[str]) -> None:
    weak = []
    if plan.mode != BWRAP:
        weak.append(
            f"isolation is WEAK ({plan.mode}): candidates can read and write this "
            "machine's files, including the run's hidden labels if permissions allow"
        )
    if plan.mode == RLIMITS:
        weak.append("candidates have network access")
    if os.geteuid() == 0 and not plan.own_uid:
        swept = "" if plan.mode == UNSHARE else " and escaped daemons are not swept"
        weak.append(f"candidates run as root: the process cap does not hold{swept}")
    if not weak:
        return
    message = (
        "sandbox: " + "; ".join(weak) + (f" (tried: {'; '.join(failures)})" if failures else "")
    )
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def execute(
    code: str,
    inputs: Mapping[str, bytes],
    limits: Limits,
    plan: Plan,
    *,
    workdir_root: str | Path | None = None,
    keep_workdir: bool = False,
    extra_ro_paths: Sequence[str | Path] = (),
) -> ExecResult:
    """run_script with an explicit launch plan (the probe and the tests choose one)."""
    bad = [name for name in inputs if not _plain_name(name)]
    if bad:
        raise SandboxError(f"input names must be plain file names, got {bad}")
    uid = new_uid() if plan.own_uid else None
    root = Path(workdir_root) if workdir_root is not None else None
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    workdir = new_workdir(root=root)
    try:
        _lay_out(workdir, code, inputs, plan, uid)
        return _run(code, workdir, limits, plan, uid, extra_ro_paths)
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
            if workdir.exists():
                log.warning("sandbox: could not remove workdir %s", workdir)


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..")


def _lay_out(
    workdir: Path, code: str, inputs: Mapping[str, bytes], plan: Plan, uid: int | None
) -> None:
    (workdir / "input").mkdir()
    (workdir / "submission").mkdir()
    for name, data in inputs.items():
        (workdir / "input" / name).write_bytes(data)
    (workdir / "solution.py").write_text(code, encoding="utf-8")
    if plan.mode != BWRAP:
        (workdir / ".tmp").mkdir()  # TMPDIR: without a private /tmp, temp files stay here
    if uid is not None:
        # The candidate's private uid owns its workdir: it may write there and nowhere else.
        for path in (workdir, *workdir.rglob("*")):
            os.chown(path, uid, uid, follow_symlinks=False)


def _environment(workdir: Path, plan: Plan, threads: int) -> dict[str, str]:
    env = {
        "PATH": f"{os.path.join(sys.prefix, 'bin')}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",  # a crash keeps the output printed before it
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "MPLBACKEND": "Agg",
    }
    env.update({key: str(threads) for key in THREAD_ENV})
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    if plan.mode != BWRAP:
        env["TMPDIR"] = str(workdir / ".tmp")
    return env


class _Tail:
    """The newest `cap` bytes of a stream; older bytes are counted and dropped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self.buf += data
        if len(self.buf) > 2 * self.cap:  # trim in batches: amortised O(1) per byte
            del self.buf[: len(self.buf) - self.cap]

    def text(self, chars: int) -> str:
        data = bytes(self.buf[-self.cap :])
        # 4 bytes per char at most in UTF-8: decode only what the tail can need.
        return data[-4 * chars :].decode("utf-8", errors="replace")[-chars:]


def _run(
    code: str,
    workdir: Path,
    limits: Limits,
    plan: Plan,
    uid: int | None,
    extra_ro_paths: Sequence[str | Path],
) -> ExecResult:
    env = _environment(workdir, plan, limits.threads)
    ready_r, ready_w = os.pipe()
    try:
        argv = build_argv(plan, workdir, limits, uid, ready_w, extra_ro_paths)
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, cwd=workdir, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, pass_fds=(ready_w,),
        )  # fmt: skip
    except BaseException:
        os.close(ready_r)
        raise
    finally:
        os.close(ready_w)
    try:
        outputs, timed_out, seconds = _pump(proc, start, limits, uid)
        os.set_blocking(ready_r, False)
        try:
            started = os.read(ready_r, 1) == b"1"
        except BlockingIOError:
            started = False
    finally:
        os.close(ready_r)
        _sweep(proc, uid)
    stdout, stderr = outputs
    stderr_text = stderr.text(min(limits.output_bytes, CLASSIFY_BYTES))
    if not started and not timed_out:
        last = stderr_text.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise SandboxError(f"sandbox setup failed ({plan.mode}): {last[0]}")
    offset = BWRAP_SIGNAL_OFFSET if plan.mode == BWRAP else None
    status, exit_code, error = classify(
        proc.returncode, timed_out, stderr_text, code, limits.wall_seconds, offset
    )
    return ExecResult(
        status=status,
        exit_code=exit_code,
        stdout_tail=stdout.text(limits.tail_chars),
        stderr_tail=stderr.text(limits.tail_chars),
        seconds=round(seconds, 3),
        error=error,
        isolation=plan.mode,
        **submission_files(workdir),
    )


def _pump(
    proc: subprocess.Popen[bytes], start: float, limits: Limits, uid: int | None
) -> tuple[tuple[_Tail, _Tail], bool, float]:
    """Read both pipes until the candidate is over; kill it at the deadline.

    Returns the two tails, whether it timed out and its run time in seconds.
    """
    assert proc.stdout is not None and proc.stderr is not None
    tails = (_Tail(limits.output_bytes), _Tail(limits.output_bytes))
    selector = selectors.DefaultSelector()
    for stream, tail in zip((proc.stdout, proc.stderr), tails, strict=True):
        os.set_blocking(stream.fileno(), False)
        selector.register(stream.fileno(), selectors.EVENT_READ, tail)
    deadline = start + limits.wall_seconds
    timed_out = False
    ended_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if ended_at is None and proc.poll() is not None:
                ended_at = now
                # A daemonised grandchild may still hold the pipes: end it now, then drain.
                _sweep(proc, uid)
            if ended_at is None and now >= deadline and not timed_out:
                timed_out = True
                _kill_group(proc)
            if ended_at is not None and (not selector.get_map() or now - ended_at > _DRAIN_GRACE):
                break
            wait = 0.1 if ended_at is not None or timed_out else min(0.1, deadline - now)
            if not selector.get_map():
                time.sleep(max(wait, 0.001))
                continue
            for key, _ in selector.select(max(wait, 0.0)):
                try:
                    data = os.read(key.fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if data:
                    key.data.feed(data)
                else:
                    selector.unregister(key.fd)
    finally:
        selector.close()
        proc.stdout.close()
        proc.stderr.close()
    seconds = (ended_at if ended_at is not None else time.monotonic()) - start
    return tails, timed_out, seconds


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # start_new_session made the candidate (or bwrap/unshare) a group leader; with bwrap the
    # pid namespace's init dies with it (--die-with-parent) and takes every process inside.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _sweep(proc: subprocess.Popen[bytes], uid: int | None) -> None:
    """Leave nothing of the candidate running: its group, then every process of its uid."""
    _kill_group(proc)
    if uid is not None and not kill_uid(uid):
        log.warning("sandbox: processes of uid %d survived the sweep", uid)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("sandbox: process %d did not exit after SIGKILL", proc.pid)


def submission_files(workdir: Path) -> dict[str, bytes | None]:
    """The ExecResult fields of what a run left in `workdir`/submission."""
    return {"valid_csv": _read_submission(workdir, "valid.csv"),
            "test_csv": _read_submission(workdir, "test.csv"),
            "train_csv": _read_submission(workdir, "train.csv"),
            "fitted": _read_submission(workdir, "fitted.pkl"),
            "gate_csv": _read_submission(workdir, "gate.csv")}


def _read_submission(workdir: Path, name: str, folders: Sequence[str] = ("submission",)
                     ) -> bytes | None:
    """Bytes of <folders...>/<name> under `workdir` if it is a regular file; no link is
    followed, at any level.

    We read as root what the candidate wrote: a symlink to a hidden label file (or a FIFO
    that would block) must not be followed.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW
    try:
        dir_fd = os.open(workdir, flags | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for folder in folders:
            inner = os.open(folder, flags | os.O_DIRECTORY, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = inner
        fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        left = SUBMISSION_CAP
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
