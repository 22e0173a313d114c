"""Joining the embedded model's chunks: order, verification, caching, and the missing-extra hint.

Uses small fake chunks (and fake part packages on sys.path) so it runs in milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from actors import model_assets
from actors.model_assets import embedded_model_path, part_paths
from common.errors import BackendError

CHUNKS = [b"GGUF" + b"a" * 10, b"b" * 7, b"c" * 3]
WHOLE = b"".join(CHUNKS)
SHA = hashlib.sha256(WHOLE).hexdigest()


def write_parts(root: Path, chunks: list[bytes] = CHUNKS) -> list[Path]:
    paths = []
    for n, chunk in enumerate(chunks, start=1):
        path = root / f"chunk{n}.bin"
        path.write_bytes(chunk)
        paths.append(path)
    return paths


def assemble(cache: Path, parts: list[Path], **kwargs: object) -> Path:
    options: dict[str, object] = {"expected_size": len(WHOLE), "sha256_prefix": SHA[:8]}
    options.update(kwargs)
    return embedded_model_path(cache, parts=parts, **options)  # type: ignore[arg-type]


def test_joins_parts_in_order_and_leaves_only_the_file_and_marker(tmp_path: Path) -> None:
    parts = write_parts(tmp_path)
    path = assemble(tmp_path / "cache", parts)
    assert path.read_bytes() == WHOLE
    assert path.parent == tmp_path / "cache"
    leftovers = sorted(p.name for p in path.parent.iterdir())
    assert leftovers == [path.name, path.name + ".lock", path.name + ".ok"]  # no temp files


def test_parts_out_of_order_fail_the_hash_and_remove_the_file(tmp_path: Path) -> None:
    parts = write_parts(tmp_path)
    with pytest.raises(BackendError, match="sha256"):
        assemble(tmp_path / "cache", [parts[0], parts[2], parts[1]])
    assert not list((tmp_path / "cache").glob("*.gguf"))


def test_size_mismatch_names_the_sizes_and_removes_the_file(tmp_path: Path) -> None:
    parts = write_parts(tmp_path)
    with pytest.raises(BackendError, match=f"size {len(WHOLE)} bytes, expected 999"):
        assemble(tmp_path / "cache", parts, expected_size=999)
    assert not list((tmp_path / "cache").glob("*.gguf"))


def test_wrong_magic_is_rejected(tmp_path: Path) -> None:
    chunks = [b"NOPE" + CHUNKS[0][4:], *CHUNKS[1:]]
    parts = write_parts(tmp_path, chunks)
    sha = hashlib.sha256(b"".join(chunks)).hexdigest()
    with pytest.raises(BackendError, match="GGUF magic"):
        assemble(tmp_path / "cache", parts, sha256_prefix=sha[:8])


def test_second_call_trusts_the_marker_and_skips_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = write_parts(tmp_path)
    first = assemble(tmp_path / "cache", parts)

    def no_hashing(*args: object) -> str:
        raise AssertionError("hashed or joined again")

    monkeypatch.setattr(model_assets, "_join", no_hashing)
    monkeypatch.setattr(model_assets, "_sha256_of", no_hashing)
    for part in parts:  # the parts are not even needed once the cache is good
        part.unlink()
    assert assemble(tmp_path / "cache", []) == first


def test_a_changed_file_is_rehashed_and_rebuilt(tmp_path: Path) -> None:
    parts = write_parts(tmp_path)
    path = assemble(tmp_path / "cache", parts)
    path.write_bytes(b"GGUF" + b"x" * (len(WHOLE) - 4))  # same size, new mtime, wrong content
    os.utime(path, ns=(1, 1))
    assert assemble(tmp_path / "cache", parts).read_bytes() == WHOLE


def test_an_unmarked_good_file_is_kept_after_one_hash(tmp_path: Path) -> None:
    parts = write_parts(tmp_path)
    path = assemble(tmp_path / "cache", parts)
    path.with_name(path.name + ".ok").unlink()  # as if we crashed between rename and marker
    assert assemble(tmp_path / "cache", []) == path
    assert path.with_name(path.name + ".ok").is_file()


def test_concurrent_callers_all_get_the_whole_file(tmp_path: Path) -> None:
    parts = write_parts(tmp_path)
    results: list[bytes] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            results.append(assemble(tmp_path / "cache", parts).read_bytes())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [WHOLE] * 6


def test_default_cache_dir_honours_treeml_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREEML_CACHE", str(tmp_path / "c"))
    parts = write_parts(tmp_path)
    assert assemble(None, parts, file_name="m.gguf") == tmp_path / "c" / "m.gguf"  # type: ignore[arg-type]


def make_part_package(root: Path, package: str, n: int, data: bytes) -> None:
    pkg = root / f"{package}{n}"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('find_spec must not import me')\n")
    (pkg / "data" / f"part{n:02d}.bin").write_bytes(data)


def test_part_paths_finds_installed_packages_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in (2, 1, 3):
        make_part_package(tmp_path, "fakemodel_part", n, CHUNKS[n - 1])
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = part_paths("fakemodel_part", 3)
    assert [p.read_bytes() for p in paths] == CHUNKS
    assert [p.name for p in paths] == ["part01.bin", "part02.bin", "part03.bin"]


def test_missing_part_names_the_package_and_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in (1, 3):
        make_part_package(tmp_path, "fakemodel_part", n, CHUNKS[n - 1])
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BackendError) as info:
        part_paths("fakemodel_part", 3)
    message = str(info.value)
    assert message == (
        "embedded model not installed: pip install -e '.[local]' (missing fakemodel-part2)"
    )
    assert "\n" not in message


def test_missing_part_fails_before_touching_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_assets, "part_paths", lambda: part_paths("no_such_model_part", 22))
    with pytest.raises(BackendError, match=r"missing no-such-model-part1\)$"):
        embedded_model_path(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
