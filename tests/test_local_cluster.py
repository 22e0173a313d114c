"""The cluster rig's mounts (tests/local_cluster.py) from a checkout under /tmp, in a folder
whose name has a space: the rig hides the host's /tmp, and once hid the checkout and its .venv
with it, so `ray up` failed before it started (issue 44). Only the mounts run here, inside
`unshare --mount` (about a second); tests/test_cluster_up.py runs the whole rig.

Needs root and mount namespaces; skipped, saying why, where the host refuses them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import venv
from pathlib import Path

import pytest

from tests.local_cluster import CHECKOUT

# What `python -m tests.local_cluster mounts` imports: the standard library and these files.
RIG_FILES = ("pyproject.toml", "tests/__init__.py", "tests/local_cluster.py")


def mount_namespaces_refused() -> str | None:
    if os.geteuid() != 0:
        return "the rig's mounts need root"
    probe = subprocess.run(["unshare", "--mount", "--fork", "true"], capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        return f"unshare --mount is refused here: {probe.stderr.strip()}"
    return None


def test_the_rig_hides_the_hosts_tmp_but_not_a_checkout_and_venv_under_it() -> None:
    refused = mount_namespaces_refused()
    if refused:
        pytest.skip(refused)
    with tempfile.TemporaryDirectory(prefix="treeml-rig-", dir="/tmp") as host_tmp:
        beside = Path(host_tmp)
        (beside / "host-only").write_text("the rig must not see this")
        copy = beside / "tree ml"
        for name in RIG_FILES:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(CHECKOUT / name, copy / name)
        # The copy's own venv, as README command 1 makes one: the rig runs on its python.
        venv.create(copy / ".venv", with_pip=False, symlinks=True)
        work = beside / "work"
        work.mkdir()
        done = subprocess.run(["unshare", "--mount", "--fork", str(copy / ".venv/bin/python"),
                               "-m", "tests.local_cluster", "mounts", str(work)],
                              cwd=copy, capture_output=True, text=True, check=False, timeout=60)
        assert done.returncode == 0, done.stderr
        seen = json.loads((work / "mounts.json").read_text())

        assert seen["tmp"] == [beside.name]  # the host's /tmp is hidden but for the checkout
        assert seen["beside_checkout"] == [copy.name]
        assert seen["checkout"] == sorted(os.listdir(copy))
        assert seen["python"] == {"rc": 0, "stderr": ""}  # the venv's python, at its own path
        assert seen["client_checkout"] == sorted([*os.listdir(copy), "runs"])
        # What the client writes lands in WORK, never in the checkout.
        assert (work / "overlay" / "upper" / "runs" / "probe").read_text() == (
            "written by the client")
        assert not (copy / "runs").exists()
