"""The atomic write: the content lands whole, no temporary is left, and a write that fails
leaves the old file as it was; the same for a folder written whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fileio import replacing, replacing_dir, write_atomic


def test_writes_bytes_and_text_and_leaves_only_the_target(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    write_atomic(target, b"\x00\x01 bytes")
    assert target.read_bytes() == b"\x00\x01 bytes"
    write_atomic(target, "héllo\nworld\n")
    assert target.read_bytes() == "héllo\nworld\n".encode()
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_the_file_gets_the_permissions_open_would_give(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.txt", "x")
    finally:
        os.umask(umask)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644


def test_the_temporary_is_hidden_beside_the_target(tmp_path: Path) -> None:
    target = tmp_path / "part-000001.parquet"
    with replacing(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".") and tmp.exists()
        assert not list(tmp_path.glob("part-*.parquet"))
        tmp.write_text("written by any means")
    assert target.read_text() == "written by any means"
    assert not tmp.exists()


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    target.write_text("old")
    with pytest.raises(OSError, match="No space left"), replacing(target) as tmp:
        tmp.write_text("half of the ne")
        raise OSError(28, "No space left on device")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_write_atomic_failing_mid_write_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "tree.html"
    target.write_text("old page")

    def torn_write(self: Path, data: bytes) -> int:
        with open(self, "wb") as handle:
            handle.write(data[:3])
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(Path, "write_bytes", torn_write)
    with pytest.raises(OSError, match="Input/output"):
        write_atomic(target, "new page")
    assert target.read_text() == "old page"
    assert [p.name for p in tmp_path.iterdir()] == ["tree.html"]


def test_a_folder_is_replaced_whole(tmp_path: Path) -> None:
    best = tmp_path / "best"
    (best / "submission").mkdir(parents=True)
    (best / "submission" / "old.csv").write_text("old")
    (tmp_path / ".best.tmp").mkdir()  # left by a crash mid-write
    (tmp_path / ".best.tmp" / "torn.py").write_text("half")
    with replacing_dir(best) as staging:
        assert list(staging.iterdir()) == [], "a stale staging folder is cleared first"
        (staging / "solution.py").write_text("new")
    assert [p.name for p in best.iterdir()] == ["solution.py"]
    assert [p.name for p in tmp_path.iterdir()] == ["best"]


def test_a_failed_folder_write_keeps_the_old_folder(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    (good / "1-a").write_text("kept")
    with pytest.raises(OSError, match="No space left"), replacing_dir(good) as staging:
        (staging / "1-b").write_text("half")
        raise OSError(28, "No space left on device")
    assert [p.name for p in good.iterdir()] == ["1-a"]
    assert [p.name for p in tmp_path.iterdir()] == ["good"]
