"""The sandbox's records: the limits a candidate runs under and what one run produced."""

from __future__ import annotations

from dataclasses import dataclass

STATUSES = ("ok", "buggy", "timeout", "oom", "killed")


class SandboxError(RuntimeError):
    """Our own failure to set up or run a sandbox; never the candidate's doing."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one candidate may use. Sizes are in bytes, times in seconds."""

    wall_seconds: float = 600.0
    memory_bytes: int = 6 * 2**30  # RLIMIT_AS of every candidate process (with a GPU:
    # RLIMIT_DATA, see sandbox/_isolation.py SHIM)
    max_processes: int = 512  # RLIMIT_NPROC: processes and threads of the candidate's uid
    output_bytes: int = 2_000_000  # of stdout and of stderr each, the newest bytes are kept
    file_bytes: int = 2 * 2**30  # RLIMIT_FSIZE; also the size of the private /tmp
    tail_chars: int = 4000  # characters of stdout/stderr returned
    threads: int = 1  # OpenMP/BLAS threads: one per executor slot, so candidates never
    # oversubscribe the cores an LLM or other executors use (contention made a 1 s LightGBM
    # fit take 63 s beside llama.cpp on 2 cores)
    nice: int = 0  # the niceness the candidate runs at, at least (19: on what the rest of the
    # machine leaves idle; a process may raise its niceness, never lower it)

    def __post_init__(self) -> None:
        if self.wall_seconds <= 0:
            raise ValueError(f"wall_seconds must be positive, got {self.wall_seconds}")
        if not 0 <= self.nice <= 19:
            raise ValueError(f"nice must be 0 to 19, got {self.nice}")
        for name in ("memory_bytes", "max_processes", "output_bytes", "file_bytes", "tail_chars",
                     "threads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The outcome of one candidate run; a crash, timeout or OOM is data here, not an error."""

    status: str  # one of STATUSES
    exit_code: int | None  # negative: killed by that signal; None: we killed it (timeout)
    stdout_tail: str
    stderr_tail: str
    seconds: float
    valid_csv: bytes | None  # submission/valid.csv if the candidate wrote one
    test_csv: bytes | None  # submission/test.csv if the candidate wrote one
    error: str  # one short line, "" when ok
    isolation: str  # "bwrap" | "unshare" | "rlimits"
    train_csv: bytes | None = None  # submission/train.csv: the harness's in-sample predictions
    fitted: bytes | None = None  # submission/fitted.pkl: saved model fits (operators/fitted.py)
    gate_csv: bytes | None = None  # submission/gate.csv: a feature program's fresh pairs
