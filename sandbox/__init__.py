"""Isolated execution of generated scripts: bubblewrap, else unshare, else rlimits only.

`run_script(code, inputs, limits)` runs one candidate in a fresh workdir laid out per the
harness contract and returns an `ExecResult`; a crash, timeout or OOM is a status, and only
our own failure to build the sandbox raises `SandboxError`.
"""

from sandbox._runner import SUBMISSION_CAP, isolation_mode, run_script
from sandbox._types import ExecResult, Limits, SandboxError

__all__ = ["SUBMISSION_CAP", "ExecResult", "Limits", "SandboxError", "isolation_mode",
           "run_script"]
