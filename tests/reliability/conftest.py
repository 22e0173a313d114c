"""Shared fixtures of the reliability suite."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from tests.conftest import SharedRay

# Both fixtures below hold for this package's tests only (scope "package"): a test process
# that runs other files after these gets its TMPDIR and its shared Ray back, rather than
# starting a Ray of its own for every later search.


@pytest.fixture(scope="package", autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Sandbox workdirs (and so candidates' HOME) under a folder of this suite alone: the leak
    checks then see this suite's sandboxes, not those of other runs on the same machine.
    Short, since Ray puts its sockets under it."""
    # pytest picks its own base folder once, from TMPDIR: before it changes, so that the
    # tmp_path of tests after this suite does not lie in the folder removed below.
    tmp_path_factory.getbasetemp()
    folder = Path(f"/tmp/rel-{secrets.token_hex(3)}")
    folder.mkdir()
    old_env, old_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(folder), str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = old_tempdir
        if old_env is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = old_env
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="package", autouse=True)
def own_ray(private_tmpdir: Path) -> Iterator[None]:
    """No shared Ray while this suite runs (tests/conftest.py): the sandboxes of its runs must
    see private_tmpdir's TMPDIR, which a Ray started before it would not pass to its
    actors."""
    SharedRay.turn_off()
    try:
        yield
    finally:
        SharedRay.turn_on()


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    ray.init(address="local", num_cpus=4, include_dashboard=False,
             object_store_memory=100 * 2**20, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()
