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


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir() -> Iterator[Path]:
    """Sandbox workdirs (and so candidates' HOME) under a folder of this suite alone: the leak
    checks then see this suite's sandboxes, not those of other runs on the same machine.
    Short, since Ray puts its sockets under it."""
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


@pytest.fixture(scope="session", autouse=True)
def own_ray() -> None:
    """No shared Ray from here on in this process (tests/conftest.py): the sandboxes of this
    suite's runs must see private_tmpdir's TMPDIR, which a Ray started before it would not
    pass to its actors."""
    SharedRay.turn_off()


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    ray.init(address="local", num_cpus=4, include_dashboard=False,
             object_store_memory=100 * 2**20, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()
