"""The cluster rig's mounts (tests/local_cluster.py) from a checkout under /tmp, in a folder
whose name has a space: the rig hides the host's /tmp, and once hid the checkout and its .venv
with it, so `ray up` failed before it started (issue 44). Only the mounts run here, inside
`unshare --mount` (about a second); tests/test_cluster_up.py runs the whole rig. Then which
host paths the rig keeps, and the one line it gives where it cannot run.

The mounts need root, mount namespaces and rsync; skipped, saying why, where the host lacks them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from pathlib import Path

import pytest
import yaml

from tests import local_cluster
from tests.local_cluster import CHECKOUT

# What `python -m tests.local_cluster mounts` reads: the standard library, PyYAML and these files.
RIG_FILES = ("pyproject.toml", ".gitignore", "cluster-local.yaml", "tests/__init__.py",
             "tests/local_cluster.py")


def mount_namespaces_refused() -> str | None:
    if os.geteuid() != 0:
        return "the rig's mounts need root"
    if shutil.which("rsync") is None:
        return "the rig copies the checkout with rsync: install it (.ci/run does)"
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
        # The copy's own venv, as README command 1 makes one: the rig runs on its python. It
        # gets a copy of this process's PyYAML: a path to that one may lie under the /tmp the
        # rig hides (a checkout cloned there, as CI's may be).
        venv.create(copy / ".venv", with_pip=False, symlinks=True)
        site = sysconfig.get_path("purelib", vars={"base": str(copy / ".venv")})
        shutil.copytree(Path(yaml.__file__).parent, Path(site, "yaml"))
        (copy / "tests" / "__pycache__").mkdir()  # git ignores it: not sent
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
        # The client's checkout is a copy of what `ray up` sends: no venv, nothing git ignores.
        assert seen["client_checkout"] == sorted(
            [*(set(os.listdir(copy)) - {".venv"}), "runs"])
        assert seen["client_tests"] == ["__init__.py", "local_cluster.py"]
        # What the client writes lands in WORK, never in the checkout.
        assert (work / "overlay" / "upper" / "runs" / "probe").read_text() == (
            "written by the client")
        assert not (copy / "runs").exists()


def test_kept_host_paths_are_the_outermost_of_the_checkout_and_venv_under_a_hidden_folder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = Path("/tmp/tree ml")
    monkeypatch.setattr(local_cluster, "CHECKOUT", checkout)
    monkeypatch.setattr(sys, "prefix", str(checkout / ".venv"))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    assert local_cluster.kept_host_paths() == [checkout]
    monkeypatch.setattr(sys, "prefix", "/mnt/venvs/treeml")
    assert local_cluster.kept_host_paths() == [Path("/mnt/venvs/treeml"), checkout]


def test_a_checkout_where_the_rig_keeps_its_own_folders_is_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_cluster, "CHECKOUT", local_cluster.MNT / "treeml")
    with pytest.raises(local_cluster.HostUnfit) as refused:
        local_cluster.kept_host_paths()
    assert str(refused.value).count("\n") == 0
    assert "/mnt/work/treeml" in str(refused.value)


def test_a_host_without_root_is_told_in_one_line_what_the_rig_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    lacks = local_cluster.host_lacks()
    assert lacks is not None and "\n" not in lacks
    assert lacks.startswith(f"the cluster rig needs {local_cluster.NEEDS}")
    assert lacks.endswith("run it as root")
