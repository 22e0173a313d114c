"""Atomic file writes: a file is replaced whole or not at all.

A reader (a resumed run, `show`, a browser on tree.html, a second process sharing the model
cache) must never see a half-written file, and a crash or a full disk mid-write must leave the
old file as it was. So every file is written under a hidden temporary name beside its target
(same directory, so same file system: the rename is atomic), fsynced (the rename must never
publish bytes that are still only in the page cache), then renamed over the target; on any
failure the temporary is removed and the error propagates.

A package of its own, below every other: it is I/O, so it cannot live in `search/` (pure), yet
`engine/`, `actors/` and the benchmarks all write files this way, and imports only flow down.
It imports nothing of ours.

A folder written as a whole (`good/`, `best/`, its `model/`, a node's kept predictions, an
exported bundle) is staged the same way: `replacing_dir` yields a hidden staging folder and
renames it over the old one.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["replacing", "replacing_dir", "write_atomic"]


@contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside `target` to write by any means (a Parquet writer, a stream
    of chunks); on a clean exit it is fsynced and renamed over `target`, on an error removed.

    The name is unique (a random token), so two processes writing the same target never write
    into one temporary; a leading dot hides it from globs such as `part-*.parquet`. It is
    created empty with the usual permissions (0666 less the umask, as `open` gives)."""
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(target: Path, data: bytes | str) -> None:
    """Replace `target` with `data` whole (text is written as UTF-8, newlines untranslated)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with replacing(target) as tmp:
        tmp.write_bytes(payload)


@contextmanager
def replacing_dir(target: Path) -> Iterator[Path]:
    """Yield an empty hidden staging folder beside `target` (`.<name>.tmp`, left over from a
    crash or not); on a clean exit the old `target` is removed and the staging folder renamed
    into its place, on an error the staging folder is removed. A reader may find no `target`
    for the moment between the two, never a half-written one."""
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
