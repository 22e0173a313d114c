"""How a candidate is confined: the bubblewrap / unshare / rlimits command lines and the
per-run uid whose processes are killed as a whole afterwards.

Every mode ends in the same small shim (run by our own interpreter with -I -S, so it imports
nothing but `os`, `resource` and `sys`): it sets the rlimits, drops to the run's own uid when
we are root, tells us through a pipe that setup is over, and execs `python solution.py`.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox._types import Limits, SandboxError

BWRAP = "bwrap"
UNSHARE = "unshare"
RLIMITS = "rlimits"

# bubblewrap's pid 1 exits with 128 + N when the candidate dies of signal N.
BWRAP_SIGNAL_OFFSET = 128

# Each run gets a fresh uid from this range (no passwd entry needed): root is exempt from
# RLIMIT_NPROC and the limit counts all processes of a uid, so a private, unprivileged uid is
# what makes the process cap hold, keeps concurrent runs from sharing one cap, and lets
# kill(-1) from that uid end everything the run left behind. 2**30 values make a clash
# between two concurrent runs negligible.
_UID_BASE = 2**30
_UID_SPAN = 2**30

# System trees bound read-only; where they are symlinks (merged /usr) the link is recreated.
_SYSTEM_PATHS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc")

SHIM = """\
import os, resource, sys
ready, mem, fsize, nproc, uid, nice = map(int, sys.argv[1:7])
os.nice(max(0, nice - os.nice(0)))
# With a GPU the memory cap is on data (heap, private writable mappings), not address space:
# CUDA reserves address space for the whole GPU and more at its first call, which no RAM cap
# of a few GiB allows; a candidate that fills RAM is still stopped.
gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
memory = resource.RLIMIT_DATA if gpu else resource.RLIMIT_AS
for res, value in ((memory, mem), (resource.RLIMIT_FSIZE, fsize),
                   (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_CORE, 0)):
    hard = resource.getrlimit(res)[1]
    if hard != resource.RLIM_INFINITY and os.geteuid() != 0:
        value = min(value, hard)
    resource.setrlimit(res, (value, value))
if uid >= 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
os.write(ready, b"1")
os.close(ready)
os.execv(sys.argv[7], sys.argv[7:])
"""


@dataclass(frozen=True, slots=True)
class Plan:
    """A launch method: the isolation mode and whether the candidate gets its own uid."""

    mode: str
    own_uid: bool


def new_uid() -> int:
    return _UID_BASE + secrets.randbelow(_UID_SPAN)


def inner_argv(limits: Limits, uid: int | None, ready_fd: int) -> list[str]:
    """The shim, then `python solution.py` (relative: the candidate's cwd is its workdir)."""
    return [
        sys.executable, "-I", "-S", "-c", SHIM,
        str(ready_fd), str(limits.memory_bytes), str(limits.file_bytes),
        str(limits.max_processes), str(-1 if uid is None else uid), str(limits.nice),
        sys.executable, "solution.py",
    ]  # fmt: skip


def build_argv(
    plan: Plan,
    workdir: Path,
    limits: Limits,
    uid: int | None,
    ready_fd: int,
    extra_ro_paths: Sequence[str | Path] = (),
) -> list[str]:
    inner = inner_argv(limits, uid, ready_fd)
    if plan.mode == RLIMITS:
        return inner
    if plan.mode == UNSHARE:
        # Own network and pid namespace; --kill-child ends the namespace with our child.
        unshare = shutil.which("unshare") or "unshare"
        return [unshare, "--net", "--pid", "--fork", "--kill-child", "--", *inner]
    if plan.mode == BWRAP:
        return [*bwrap_prefix(workdir, limits, uid is not None, extra_ro_paths), "--", *inner]
    raise SandboxError(f"unknown isolation mode {plan.mode!r}")


def python_paths() -> list[str]:
    """Directories the interpreter needs: the venv and the installation it was made from."""
    paths: list[str] = []
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        paths += [os.path.abspath(prefix), os.path.realpath(prefix)]
    # A venv's python is a symlink chain into the base installation: bind where it ends.
    real_exe = os.path.realpath(sys.executable)
    paths.append(os.path.dirname(os.path.dirname(real_exe)))
    return list(dict.fromkeys(paths))


def bwrap_prefix(
    workdir: Path, limits: Limits, drop_caps_to_uid: bool, extra_ro_paths: Sequence[str | Path]
) -> list[str]:
    """bubblewrap's arguments: a new root holding only system trees, Python and the workdir.

    Not `/`, not the project directory: the run's hidden labels live outside the workdir and
    must not exist inside. As root we keep the user namespace shared (a namespace created by
    root maps only uid 0, which is exempt from RLIMIT_NPROC) and keep CAP_SETUID/CAP_SETGID
    for the shim, which drops them with the switch to the run's uid; no_new_privs is set by
    bwrap. Not as root, bwrap needs its own user namespace and the candidate keeps our uid.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError("bwrap not found on PATH")
    args = [
        bwrap,
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup-try", "--die-with-parent", "--new-session",
    ]  # fmt: skip
    if os.geteuid() != 0:
        args.append("--unshare-user")
    bound: list[str] = []  # destinations visible so far (no --dir needed under them)
    made: set[str] = set()

    def parents(dest: str) -> list[str]:
        # bwrap creates missing parents with the host parent's mode (0700 for /root), which
        # would stop the unprivileged candidate: make them 0755 ourselves.
        out: list[str] = []
        for parent in reversed(Path(dest).parents):
            text = str(parent)
            if text == "/" or text in made or _under(text, bound):
                continue
            made.add(text)
            out += ["--perms", "0755", "--dir", text]
        return out

    for path in _SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
            bound.append(path)
    args += ["--proc", "/proc", "--dev", "/dev", *gpu_device_binds()]
    # Private, size-capped /tmp and /dev/shm (joblib/multiprocessing need a writable shm),
    # mounted before the binds below so a venv or workdir under /tmp stays visible.
    size = str(limits.file_bytes)
    args += ["--size", size, "--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--size", size, "--perms", "1777", "--tmpfs", "/dev/shm"]
    made.update(("/tmp", "/dev", "/proc"))
    wanted = python_paths() + [os.path.abspath(p) for p in extra_ro_paths]
    for path in sorted(dict.fromkeys(wanted), key=len):
        if not os.path.exists(path):
            raise SandboxError(f"read-only path for the sandbox does not exist: {path}")
        if _under(path, bound):
            continue
        args += [*parents(path), "--ro-bind", path, path]
        bound.append(path)
    real_exe = os.path.realpath(sys.executable)
    if not _under(real_exe, bound):
        raise SandboxError(f"interpreter {real_exe} is outside every sandbox bind")
    work = str(workdir)
    args += [*parents(work), "--bind", work, work, "--chdir", work]
    if drop_caps_to_uid:
        args += ["--cap-add", "CAP_SETUID,CAP_SETGID"]
    return args


def gpu_device_binds(visible: str | None = None,
                     devices: Sequence[str] | None = None) -> list[str]:
    """`--dev-bind` arguments for the NVIDIA device nodes, when this process was given GPUs.

    Ray sets CUDA_VISIBLE_DEVICES for an executor started with a GPU share (--executor-gpus)
    and the runner passes it on; bwrap's private /dev would still hide the devices. Without
    GPUs (the variable unset or empty) nothing is bound.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "") if visible is None else visible
    if not visible.strip():
        return []
    found = sorted(glob.glob("/dev/nvidia*")) if devices is None else list(devices)
    return [arg for device in found for arg in ("--dev-bind", device, device)]


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def pids_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is `uid`, from /proc."""
    pids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as fh:
                status = fh.read()
        except OSError:  # exited while we looked
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uids = fields.get("Uid", "").split()
        if uids and int(uids[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
            pids.append(int(entry))
    return pids


def kill_uid(uid: int, timeout: float = 5.0) -> bool:
    """SIGKILL every process of `uid`; True when none is left.

    kill(-1) sent *as that uid* reaches exactly that uid's processes (pid reuse cannot make us
    hit a stranger), and it is repeated because a fork bomb may fork during one sweep.
    """
    deadline = time.monotonic() + timeout
    while pids_of_uid(uid):
        if time.monotonic() > deadline:
            return False
        subprocess.run(
            ["/bin/sh", "-c", "kill -9 -1"],
            user=uid, group=uid, extra_groups=[],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            check=False,
        )  # fmt: skip
        time.sleep(0.01)
    return True
