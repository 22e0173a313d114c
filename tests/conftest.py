"""Test-wide settings: runs the suite starts use no solution memory unless a test names one
(the user's ~/.cache/treeml/memory.sqlite is never read or written by a test).

Under pytest-xdist (.ci/run passes `-n`), whole test files go to the workers, as
`--dist loadfile` would send them: a module's shared fixture (often a whole scripted search)
is then built once, on one worker. The files that share tests/test_outputs.py's `scripted_run`
(one search for the whole process) go to one worker together, so that search runs once too.

The longest units start first (LONGEST_FIRST). The first search a test process runs starts a
Ray that the later ones join (a run keeps a Ray its program started) instead of each starting
and stopping its own: about 5 s a search."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ["TREEML_MEMORY"] = "off"  # engine/memory.py ENV; inherited by CLI subprocesses

# Enough for the most actors a test's run starts (executors and LLM replicas): Ray places
# actors by these counts, not by the machine's 2 cores.
SHARED_RAY_CPUS = 8


class SharedRay:
    """Whether searches share the test process's Ray. Tests whose actors must see what their
    process sets after the Ray started (the reliability suite's TMPDIR) turn it off: each run
    then starts its own Ray, as a user's run does."""

    on = True

    @classmethod
    def turn_off(cls) -> None:
        import ray

        cls.on = False
        if ray.is_initialized():
            ray.shutdown()

    @classmethod
    def turn_on(cls) -> None:
        """Searches share a Ray again: the next one starts it (one a test left is closed)."""
        import ray

        cls.on = True
        if ray.is_initialized():
            ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def shared_ray() -> Iterator[None]:
    """Searches run in this process start one Ray, on the first search (a process that runs
    none, such as the peers' AutoGluon, whose fits use a Ray they find, never has one)."""
    import ray

    import engine.search_run
    from actors.workers import ray_session, start_private_ray

    @contextlib.contextmanager
    def shared_session(address: str | None, actors: int) -> Iterator[None]:
        if SharedRay.on and address is None and not ray.is_initialized():
            start_private_ray(SHARED_RAY_CPUS)
        with ray_session(address, actors):
            yield

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine.search_run, "ray_session", shared_session)
        yield
    if ray.is_initialized():
        ray.shutdown()


# The files whose tests use test_outputs.scripted_run. A user missing here still passes; its
# worker only runs that search once more.
SCRIPTED_RUN_FILES = frozenset({
    "tests/test_outputs.py", "tests/test_predict.py", "tests/test_bundle.py",
    "tests/test_tree_html_browser.py", "tests/test_serve.py", "tests/test_latency.py",
})


# The default suite's longest work units, longest first, by the seconds their tests took there
# (`pytest -n 4 --durations=0`, 2 cores, 2026-11-28: 255 s for the scripted_run files down to
# 47 s). They start first, so that no long unit starts last and keeps one worker busy while the
# others have finished (longest-first scheduling); every other file follows in collection
# order. A name missing here only costs time.
LONGEST_FIRST = (
    "scripted_run", "tests/test_benchmarks.py", "tests/test_full_loop.py",
    "tests/test_fitted.py", "tests/reliability/test_disk_fault.py",
    "tests/test_export.py", "tests/reliability/test_load.py", "tests/test_fitted_model.py",
    "tests/reliability/test_cluster_fault.py", "tests/test_api.py", "tests/test_workers.py",
    "tests/reliability/test_leakage.py", "tests/test_kept_models.py",
)


def work_unit(nodeid: str) -> str:
    """A test's unit of work: its file, or the group of files that share scripted_run."""
    path = nodeid.split("::", 1)[0]
    return "scripted_run" if path in SCRIPTED_RUN_FILES else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))  # stable


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own choice by --dist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        """One work unit per test file, or per group of files that share a fixture."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    # Units in collection order, which LONGEST_FIRST set; xdist's own order (most tests
    # first) would leave the files of one or two whole searches for the end.
    config.option.loadscopereorder = False
    return ByFile(config, log)
