"""Isolated execution of generated scripts: bubblewrap, else unshare, else rlimits only.

`run_script(code, inputs, limits)` runs one candidate in a fresh workdir laid out per the
harness contract and returns an `ExecResult`; a crash, timeout or OOM is a status, and only
our own failure to build the sandbox raises `SandboxError`. `start_session` starts a script
confined the same way that stays up and serves requests (sandbox/_session.py); a `WarmRunner`
runs engine-written scripts as `run_script` does, each forked from such a session that imported
their modules once (sandbox/_warm.py). Workdirs left by a process that was killed are removed
by the next one that makes a workdir beside them (sandbox/_workdirs.py).
"""

from sandbox._runner import SUBMISSION_CAP, THREAD_ENV, isolation_mode, run_script
from sandbox._session import REPLY_DIR, REPLY_FD_ENV, REQUEST_FILE, Reply, Session, start_session
from sandbox._types import ExecResult, Limits, SandboxError
from sandbox._warm import WarmRunner

__all__ = ["REPLY_DIR", "REPLY_FD_ENV", "REQUEST_FILE", "SUBMISSION_CAP", "THREAD_ENV",
           "ExecResult", "Limits", "Reply", "SandboxError", "Session", "WarmRunner",
           "isolation_mode", "run_script", "start_session"]
