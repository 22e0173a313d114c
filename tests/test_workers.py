"""The run's actors on a real local Ray: scripts side by side on the executors, a spare
executor on an LLM's CPU, which runs as any other once the search ends (the answer's fits
then run two at a time)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from actors.workers import LLMPool, Placement, PoolPlan, Workers, ray_session
from sandbox import Limits

LIMITS = Limits(wall_seconds=60)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"draft": ["```python\nprint(1)\n```"]}))
    with ray_session(None, 2):
        started = Workers.start([PoolPlan(f"scripted:{replies}", {}, 1, Placement(), 1)], 1,
                                spares=True)
        yield started
        started.close()


def test_scripts_run_on_the_executors_in_order_and_a_spare_on_the_llms_cpu(
        workers: Workers) -> None:
    """The LLM's CPU has a spare executor from the start, its candidates at niceness 19 (on
    what the LLM leaves idle); once no LLM is asked again it runs them as the other does."""
    jobs = [(f"import os; print({i} * 7, os.nice(0))", {}, LIMITS) for i in range(3)]
    results = [r.stdout_tail.split() for r in workers.run_scripts(jobs)]
    assert [r[0] for r in results] == ["0", "7", "14"]
    niceness = results[0][1]  # the executor's own: Ray's workers run at 15 by default
    assert [r[1] for r in results] == [niceness, "19", niceness]  # jobs take turns
    assert len(workers.spares) == 1 and len(workers.executors) == 2
    assert workers.lendable_cpus() == 0  # the spare took the LLM's CPU
    assert workers.lend_llm_cpus() == [] and workers.pools == [] and workers.spares == []
    jobs = [(f"import os; print({i}, os.nice(0))", {}, LIMITS) for i in range(4)]
    results = workers.run_scripts(jobs)
    assert [r.status for r in results] == ["ok"] * 4
    assert [r.stdout_tail.split() for r in results] == [[str(i), niceness] for i in range(4)]
    one = workers.run_script("print('alone')", {}, LIMITS)
    assert one.stdout_tail.strip() == "alone"


@pytest.mark.parametrize(("llm", "executor", "lent"), [
    (Placement(), Placement(), 2),
    (Placement(num_cpus=2.0), Placement(), 4),
    (Placement(resources={"llm": 1.0}), Placement(), 0),  # its node may take no executor
    (Placement(gpus=1.0), Placement(), 0),
    (Placement(), Placement(resources={"executor": 1.0}), 0),  # executors only elsewhere
])
def test_only_plain_cpus_are_lent(llm: Placement, executor: Placement, lent: int) -> None:
    # Waiting for an executor that no node can place would hang the run's end.
    pool = LLMPool("scripted:x", {}, concurrency=1, placement=llm)
    pool.actors = {"llm-0": object(), "llm-1": object()}  # two replicas; no Ray needed
    assert Workers([pool], [], executor).lendable_cpus() == lent


def test_a_run_keeps_the_ray_its_program_started_and_none_of_its_actors(
        tmp_path: Path) -> None:
    """engine.api in a notebook that already uses Ray (and this test process's shared Ray):
    the run joins it, and at its end its actors are gone and the Ray still runs."""
    import ray

    from engine.run import main
    from tests.helpers import make_data, only_run

    with ray_session(None, 2):  # this process's Ray, or a fresh one the test then stops
        assert ray.is_initialized()
        cpus = ray.cluster_resources()["CPU"]
        make_data(tmp_path / "train.csv", rows=120)
        assert main(["--data", str(tmp_path / "train.csv"), "--target", "y", "--llm", "none",
                     "--max-nodes", "2", "--folds", "1", "--executors", "2", "--budget", "2m",
                     "--quiet", "--out", str(tmp_path / "runs")]) == 0
        assert len(pd.read_parquet(only_run(tmp_path / "runs") / "nodes")) == 2
        assert ray.is_initialized()
        deadline = time.monotonic() + 30  # a killed actor's CPU comes back asynchronously
        while ray.available_resources().get("CPU", 0.0) < cpus and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.available_resources().get("CPU", 0.0) == cpus


def test_a_ray_session_stops_only_the_ray_it_started() -> None:
    # In a process of its own: this one's shared Ray must stay up for the tests after.
    script = """
import ray
from actors.workers import ray_session
with ray_session(None, 1):
    with ray_session(None, 1):
        assert ray.is_initialized()
    assert ray.is_initialized()  # the inner session found a Ray and kept it
assert not ray.is_initialized()
print("stopped once")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "stopped once", done.stderr[-2000:]


def test_an_llm_file_named_from_the_drivers_folder_reaches_its_actor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ray (this process's, or one started here) began in another folder than the one the
    driver names its LLM's file from: `--llm scripted:replies.json` after a `cd`."""
    with ray_session(None, 1):
        monkeypatch.chdir(tmp_path)
        (tmp_path / "replies.json").write_text(json.dumps({"draft": ["hi"]}))
        started = Workers.start([PoolPlan("scripted:replies.json", {}, 1, Placement(), 1)], 0)
        try:
            assert started.models() == ["scripted:replies.json"]
            assert started.pools[0].spec == "scripted:replies.json"  # routes keep their name
        finally:
            started.close()
