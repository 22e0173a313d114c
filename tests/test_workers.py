"""The run's actors on a real local Ray: scripts side by side on the executors, and the LLMs'
CPUs lent to executors once the search ends (the answer's fits then run two at a time)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.workers import LLMPool, Placement, PoolPlan, Workers, start_ray, stop_ray
from sandbox import Limits

LIMITS = Limits(wall_seconds=60)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"draft": ["```python\nprint(1)\n```"]}))
    start_ray(None, 2)
    try:
        started = Workers.start([PoolPlan(f"scripted:{replies}", {}, 1, Placement(), 1)], 1)
        yield started
        started.close()
    finally:
        stop_ray()


def test_scripts_run_on_the_executors_in_order_then_on_the_llms_cpus(
        workers: Workers) -> None:
    jobs = [(f"print({i} * 7)", {}, LIMITS) for i in range(3)]
    assert [r.stdout_tail.strip() for r in workers.run_scripts(jobs)] == ["0", "7", "14"]
    assert workers.lendable_cpus() == 1 and len(workers.executors) == 1
    assert workers.lend_llm_cpus() == 2
    assert workers.pools == [] and workers.lendable_cpus() == 0
    # the new executor got the LLM's CPU: both run, each job's result in its place
    jobs = [(f"import os; print({i}, os.getpid())", {}, LIMITS) for i in range(4)]
    results = workers.run_scripts(jobs)
    assert [r.status for r in results] == ["ok"] * 4
    assert [r.stdout_tail.split()[0] for r in results] == ["0", "1", "2", "3"]
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
