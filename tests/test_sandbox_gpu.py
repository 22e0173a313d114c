"""A GPU share for candidates (--executor-gpus): bwrap binds the NVIDIA device nodes into the
sandbox's private /dev only when Ray gave the executor GPUs (CUDA_VISIBLE_DEVICES set)."""

from __future__ import annotations

import resource
import shutil
from pathlib import Path

import pytest

from sandbox import Limits, run_script
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


LIMITS_PROBE = """
import resource
print(resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_DATA)[0])
"""


@pytest.mark.parametrize("visible", ["", "0"])
def test_memory_cap_is_on_data_when_a_gpu_is_visible(monkeypatch: pytest.MonkeyPatch,
                                                     visible: str) -> None:
    """CUDA reserves more address space than any RAM cap allows: with a GPU the candidate's
    cap moves from RLIMIT_AS to RLIMIT_DATA (run for real on an H200 by benchmarks.gpu_sandbox)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    limits = Limits(memory_bytes=3 * 2**30, wall_seconds=60)
    result = run_script(LIMITS_PROBE, {}, limits)
    assert result.status == "ok", result.stderr_tail
    address_space, data = (int(v) for v in result.stdout_tail.split())
    if visible:
        assert (address_space, data) == (resource.RLIM_INFINITY, limits.memory_bytes)
    else:
        assert address_space == limits.memory_bytes and data != limits.memory_bytes
