"""Test-wide settings: runs the suite starts use no solution memory unless a test names one
(the user's ~/.cache/treeml/memory.sqlite is never read or written by a test).

Under pytest-xdist (.ci/run passes `-n`), whole test files go to the workers, as
`--dist loadfile` would send them: a module's shared fixture (often a whole scripted search)
is then built once, on one worker. The files that share tests/test_outputs.py's `scripted_run`
(one search for the whole process) go to one worker together, so that search runs once too.

Each test process starts one Ray, and every search run in it joins that one (a run keeps a Ray
its program started) instead of starting and stopping its own: about 5 s a search."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ["TREEML_MEMORY"] = "off"  # engine/memory.py ENV; inherited by CLI subprocesses

# Enough for the most actors a test's run starts (executors and LLM replicas): Ray places
# actors by these counts, not by the machine's 2 cores.
SHARED_RAY_CPUS = 8


@pytest.fixture(scope="session", autouse=True)
def shared_ray() -> Iterator[None]:
    """The test process's Ray. A test that needs a Ray of its own (other CPUs, environment
    variables its actors must see) shuts this one down first; later runs then start their own
    Ray, as a user's run does."""
    from actors.workers import ray_session

    with ray_session(None, SHARED_RAY_CPUS):
        yield


# The files whose tests use test_outputs.scripted_run. A user missing here still passes; its
# worker only runs that search once more.
SCRIPTED_RUN_FILES = frozenset({
    "tests/test_outputs.py", "tests/test_predict.py", "tests/test_bundle.py",
    "tests/test_tree_html_browser.py", "tests/test_serve.py", "tests/test_latency.py",
})


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own choice by --dist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        """One work unit per test file, or per group of files that share a fixture."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "scripted_run" if path in SCRIPTED_RUN_FILES else path

    # Files in collection order: the reliability suite's whole runs start first. xdist's own
    # order (most tests first) would leave the files of one or two whole searches for the end.
    config.option.loadscopereorder = False
    return ByFile(config, log)
