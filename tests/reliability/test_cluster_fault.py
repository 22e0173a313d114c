"""A simulated 3-node Ray cluster with custom resources, actors started by the engine's own
placement (`--llm-resource llm --executor-resource executor`): LLM actors land on the LLM
node, executors on the executor nodes. Then an executor node is removed mid-run: its
executors die with it, the nodes they were running are recorded `lost` and proposed again on
replacement executors on the surviving node, and the run completes with every finished node
stored exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_cluster_placement_and_node_removed_mid_run(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    # Its own process, without the RAY_* variables other tests' clusters left in this one.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    subprocess.run([sys.executable, "-m", "tests.reliability.cluster_fault", str(out)],
                   check=True, timeout=400, env={**env, "RAY_AUTH_MODE": "disabled"})
    result = json.loads(out.read_text())
    assert result["placed"] == {"llm": ["llm"], "executors": ["executor"] * 4}, result
    assert result["removed"].get("done"), result
    assert result["stopped_by"] == "nodes or tokens", result
    lost = result["removed"]["in_flight_there"]
    assert lost >= 1 and result["lost"] == lost == result["statuses"].count("lost"), result
    assert all(e.startswith("executor failed") for e in result["errors"]), result
    assert result["statuses"].count("ok") == 12 - lost, result
    # Replacements started elsewhere, on an executor node, never on the head or LLM node.
    assert result["exec_restarts"] == lost, result
    assert result["restarted_on"] == ["executor"] * lost, result
    assert result["restarted_on_victim"] == 0, result
    assert result["llm_actors"] == ["llm-0"], result
    assert sorted(result["stored"]) == sorted(result["journal"]), result
    assert len(set(result["stored"])) == len(result["stored"]) == 12
    assert result["in_flight_notes"] == 0
