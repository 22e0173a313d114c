"""`ray up cluster-local.yaml` for real, with the README's cluster commands one by one: three
machines on one host (tests/local_cluster.py: an sshd on each of 127.0.0.1-3, each machine in
its own namespaces), the engine run on the head with `--address auto`, then `ray down`.

It checks that every command succeeds and the run completes; that each Ray node declares the
role the file gives its address; that the executors ran on the `executor` machine (the
`executor` and `node_ip` columns of the run's Parquet) and the LLM actor on the `llm` machine
(Ray's actor table; Parquet has its name, `llm_actor`); and that nothing is left behind: no Ray
process on any machine after `ray down`, no process at all (sshd included) when the rig ends.

Needs what tests.local_cluster.NEEDS says (root and namespaces above all: without them it fails
in one line saying so) and a package index for the machines' wheel mirror. The checkout may be
anywhere, /tmp included (tests/test_local_cluster.py). Marked `cluster` (and `slow`): its own
CI step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

from tests.local_cluster import CHECKOUT, MACHINES, declared_roles, host_lacks

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def in_network_namespace(netns: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/ns/net") == netns:
                found.append(int(entry))
        except OSError:
            continue
    return found


def tails(work: Path) -> str:
    """The end of every command's log, for a failure message."""
    return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}"
                     for log in sorted((work / "logs").glob("*.log")))


def run_rig(work: Path) -> dict[str, Any]:
    unfit = host_lacks()
    if unfit:  # a failure all the same: CI runs this step to see `ray up` work
        pytest.fail(unfit, pytrace=False)
    # The machines' wheel mirror: the project's dependencies and ray[default] at this Ray.
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(work / "wheels"),
                    "setuptools", "wheel", "pip", f"ray[default]=={ray.__version__}",
                    str(CHECKOUT)], check=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(["unshare", "--net", "--pid", "--mount", "--fork", "--kill-child",
                           "--mount-proc", sys.executable, "-m", "tests.local_cluster", "rig",
                           str(work)], cwd=CHECKOUT, env=env, stderr=subprocess.PIPE, text=True,
                          check=False, timeout=1500)
    if done.returncode != 0:
        pytest.fail(f"the rig exited {done.returncode}:\n{done.stderr[-3000:]}", pytrace=False)
    return json.loads((work / "result.json").read_text())


def test_ray_up_runs_the_engine_on_the_declared_roles_and_ray_down_leaves_nothing(
        tmp_path: Path) -> None:
    try:
        result = run_rig(tmp_path)
        logs = tails(tmp_path)
    finally:  # the machines' venvs: about 1 GB each
        for name in [*MACHINES, "wheels"]:
            shutil.rmtree(tmp_path / name, ignore_errors=True)
    steps = result["steps"]
    print("timings:", {"up (ray up + workers joined)": round(result.get("up_seconds", -1)),
                       **{name: round(s["seconds"]) for name, s in steps.items()}})
    assert list(steps) == ["ray up", "run", "rsync-down", "stop-workers", "ray down"], logs
    assert all(s["rc"] == 0 for s in steps.values()), (steps, logs)

    # Each Ray node declares what the file says of its address; the head, nothing to run on.
    config = yaml.safe_load((CHECKOUT / "cluster-local.yaml").read_text())
    roles = declared_roles(config)
    assert sorted(roles) == sorted(config["provider"]["worker_ips"])
    nodes = {n["ip"]: n["resources"] for n in result["nodes"] if n["alive"]}
    assert sorted(nodes) == sorted(MACHINES.values()), result["nodes"]
    head = nodes.pop(config["provider"]["head_ip"])
    assert not {"CPU", "executor", "llm"} & set(head), head
    for address, resources in nodes.items():
        custom = {k: v for k, v in resources.items() if k in ("executor", "llm")}
        assert custom == roles[address], (address, resources)
    executor_nodes = {a for a, r in roles.items() if "executor" in r}
    llm_nodes = {a for a, r in roles.items() if "llm" in r}

    # The run completed, and every node it ran came from an executor on an executor machine.
    (run,) = result["runs"]
    assert run["result"]["stopped_by"] == "nodes or tokens", run["result"]  # its 8 nodes
    assert run["isolation"] == "bwrap", run["isolation"]
    executed = [n for n in run["nodes"] if n["executor"]]
    assert len([n for n in executed if n["status"] == "ok"]) >= 5, run["result"]
    assert {n["node_ip"] for n in executed} <= executor_nodes, executed
    assert {n["executor"] for n in executed} == {"exec-0", "exec-1"}
    written = [n for n in run["nodes"] if n["operator"] in ("draft", "improve", "debug")]
    assert written and {n["llm_actor"] for n in written} == {"llm-0"}, written
    placed = {(a["class"], a["ip"]) for a in result["actors"]}
    assert placed == {("_ExecutorWorker", a) for a in executor_nodes} | {
        ("_LLMWorker", a) for a in llm_nodes}, result["actors"]

    # Nothing left: no Ray on any machine after `ray down`; nothing in the rig at its end (the
    # sshds stopped), and nothing on the host in the rig's network namespace.
    assert not any(result["left_after_down"].values()), result["left_after_down"]
    assert result["left_at_end"] == [], result["left_at_end"]
    assert in_network_namespace(result["netns"]) == []
