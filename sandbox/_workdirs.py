"""Sandbox workdirs, named by the process that made them, and the sweep of those left behind.

A run's or a session's workdir is removed by the process that made it once the run ends. An
executor killed in the middle (`ray.kill` at the budget's deadline, or at the end of a search)
never gets there: its warm session's workdir stayed in /tmp, one per killed executor. So a
workdir's name carries its maker's process id, `sbx-[session-]<pid>-<random>`, and the first
workdir a process makes under a folder removes those of that folder whose maker has ended.

This assumes the processes sharing the folder share one process-id namespace (one machine,
one container), as the executors of a Ray node and /tmp do.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

_NAMED = re.compile(r"sbx-(?:session-)?(\d+)-")
_swept: set[str] = set()
_swept_lock = threading.Lock()


def new_workdir(kind: str = "", root: Path | None = None) -> Path:
    """A fresh workdir under `root` (default the temp folder) named `sbx-<kind><pid>-...`,
    after sweeping that folder's orphans once per process."""
    folder = str(root if root is not None else tempfile.gettempdir())
    with _swept_lock:
        first = folder not in _swept
        _swept.add(folder)
    if first:
        sweep_orphans(Path(folder))
    return Path(tempfile.mkdtemp(prefix=f"sbx-{kind}{os.getpid()}-", dir=folder)).resolve()


def sweep_orphans(folder: Path) -> list[Path]:
    """Remove the workdirs directly under `folder` whose maker has ended; the ones removed."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        named = _NAMED.match(entry.name)
        if (named and entry.is_dir(follow_symlinks=False)
                and not _running(int(named.group(1)))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True
