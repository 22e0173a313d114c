"""A GPU share for candidates (--executor-gpus): bwrap binds the NVIDIA device nodes into the
sandbox's private /dev only when Ray gave the executor GPUs (CUDA_VISIBLE_DEVICES set)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sandbox import Limits
from sandbox._isolation import bwrap_prefix, gpu_device_binds

DEVICES = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]


def test_devices_bound_only_with_visible_gpus() -> None:
    assert gpu_device_binds("", DEVICES) == []
    assert gpu_device_binds("  ", DEVICES) == []
    assert gpu_device_binds("0", DEVICES) == [
        "--dev-bind", "/dev/nvidia0", "/dev/nvidia0",
        "--dev-bind", "/dev/nvidiactl", "/dev/nvidiactl",
        "--dev-bind", "/dev/nvidia-uvm", "/dev/nvidia-uvm",
    ]


def test_bwrap_binds_after_its_private_dev(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    if not shutil.which("bwrap"):
        pytest.skip("bwrap not installed")  # .ci/run installs it; this checks argument order
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setattr("sandbox._isolation.glob.glob", lambda pattern: ["/dev/nvidia1"])
    args = bwrap_prefix(tmp_path, Limits(), False, ())
    dev = args.index("--dev")
    bind = args.index("--dev-bind")
    assert dev < bind and args[bind:bind + 3] == ["--dev-bind", "/dev/nvidia1", "/dev/nvidia1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "--dev-bind" not in bwrap_prefix(tmp_path, Limits(), False, ())
