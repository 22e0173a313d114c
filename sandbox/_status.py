"""Turn how a candidate process ended into a status and one short error line (pure functions)."""

from __future__ import annotations

import re

# Markers of an allocation failure: Python's MemoryError (numpy's _ArrayMemoryError too),
# a C++ library's std::bad_alloc, and ENOMEM from the C library.
_OOM_MARKERS = ("std::bad_alloc", "Cannot allocate memory", "Unable to allocate")
_FILE_LINE = re.compile(r'^\s*File "([^"]*)", line (\d+)')
_MAX_EXC_CHARS = 300
_MAX_SRC_CHARS = 120


def classify(
    returncode: int | None,
    timed_out: bool,
    stderr: str,
    code: str,
    wall_seconds: float,
    signal_offset: int | None = None,
) -> tuple[str, int | None, str]:
    """Return (status, exit_code, error).

    `signal_offset` is set when a wrapper reports a signal death as offset + signal number
    (bubblewrap's pid 1 exits with 128 + N); such codes are reported as -N, like subprocess does.
    """
    if timed_out:
        return "timeout", None, f"timed out after {wall_seconds:g}s"
    if returncode is None:  # not reachable from the runner; kept total for callers
        return "killed", None, "no exit status"
    signum = _signal_of(returncode, signal_offset)
    exit_code = -signum if signum else returncode
    if returncode == 0:
        return "ok", 0, ""
    exc_line, src = final_exception(stderr, code)
    if "MemoryError" in exc_line or any(marker in stderr for marker in _OOM_MARKERS):
        return "oom", exit_code, "out of memory"
    if signum:
        return "killed", exit_code, f"killed by signal {signum}"
    if not exc_line:
        return "buggy", exit_code, f"exit code {returncode}"
    return "buggy", exit_code, exc_line if src is None else f"{exc_line} ({src})"


def _signal_of(returncode: int, signal_offset: int | None) -> int:
    if returncode < 0:
        return -returncode
    if signal_offset is not None and signal_offset < returncode <= signal_offset + 64:
        return returncode - signal_offset
    return 0


def final_exception(stderr: str, code: str) -> tuple[str, str | None]:
    """The last traceback's exception line and, if a frame is in solution.py, "line N: src".

    Without a traceback the last non-empty stderr line stands in (a C library's abort
    message, say); both are cut so the error stays one short line.
    """
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
    if not starts:
        last = next((line.strip() for line in reversed(lines) if line.strip()), "")
        return _cut(last, _MAX_EXC_CHARS), None
    block = lines[starts[-1] + 1 :]
    # The exception line is the first unindented line after the header: frames and their
    # source lines (and 3.11's ^^^ markers) are all indented.
    exc_index = next((i for i, line in enumerate(block) if line and not line[0].isspace()), None)
    exc_line = "" if exc_index is None else block[exc_index].strip()
    frames = block if exc_index is None else block[:exc_index]
    src = None
    source_lines = code.splitlines()
    for line in reversed(frames):
        match = _FILE_LINE.match(line)
        if match and match.group(1).rsplit("/", 1)[-1] == "solution.py":
            number = int(match.group(2))
            text = source_lines[number - 1].strip() if 0 < number <= len(source_lines) else ""
            src = f"line {number}: {_cut(text, _MAX_SRC_CHARS)}"
            break
    return _cut(exc_line, _MAX_EXC_CHARS), src


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
