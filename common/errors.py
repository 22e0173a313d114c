"""The one exception tree for the engine's own failures.

A candidate's failure is data (a node status); these are ours. `UserError` covers bad input
that a person can fix: the CLI prints its message as one line and exits with code 2.
"""

from __future__ import annotations

import sys


class EngineError(Exception):
    """Base of every error the engine raises about itself."""


class UserError(EngineError):
    """Bad input from the user (a file, a flag, a task). The message says what and how to fix."""


class BackendError(EngineError):
    """An LLM backend or executor could not do its job (missing extra, dead server)."""


class StoreError(EngineError):
    """The run directory is unreadable, corrupt, or does not match the task."""


def exit_code(exc: EngineError) -> int:
    """A command's exit status for one of our errors: 2 for input the user can fix, else 1."""
    return 2 if isinstance(exc, UserError) else 1


def error_exit(exc: EngineError) -> int:
    """What every command's `main` does with one of our errors: print it as one line on stderr
    and return its exit status."""
    print(f"error: {exc}", file=sys.stderr)
    return exit_code(exc)
