"""Shared fixtures of the reliability suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    ray.init(address="local", num_cpus=4, include_dashboard=False,
             object_store_memory=100 * 2**20, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()
