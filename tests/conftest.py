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
    "tests/test_closing_benchmark.py",
})


# The longest work units of both suites, longest first, by the seconds their tests took there
# (`pytest --durations=0`, 2 cores, 2026-11-28; default suite -n 4, slow suite -n 2: the
# scripted_run files 255 and 154 s, test_full_loop 177 and 96 s, test_resume 29 and 142 s,
# test_reflect and test_analyst 141 and 107 s in the slow suite alone, down to about 40 s).
# They start first, so that no long unit starts last and keeps one worker busy while the
# others have finished (longest-first scheduling; the slow suite's test_resume, 142 s, used to
# start last, by the order of collection); every other file follows in collection order. A
# unit short in one suite and long in the other costs the first little. A name missing here
# only costs time.
LONGEST_FIRST = (
    "scripted_run", "tests/test_full_loop.py", "tests/test_resume.py", "tests/test_reflect.py",
    "tests/test_benchmarks.py", "tests/test_fitted.py", "tests/test_debug_pairs.py",
    "tests/test_analyst.py", "tests/test_export.py", "tests/test_memory.py",
    "tests/reliability/test_disk_fault.py", "tests/test_fitted_model.py",
    "tests/reliability/test_load.py", "tests/reliability/test_cluster_fault.py",
    "tests/test_kept_models.py", "tests/reliability/test_leakage.py",
    "tests/test_request_run.py", "tests/test_workers.py", "tests/test_llama_slow.py",
    "tests/test_api.py",
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
