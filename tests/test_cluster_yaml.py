"""cluster.yaml is a valid Ray cluster-launcher config with the node types the engine's
placement flags expect: checked with Ray's own validator (its JSON schema plus the checks
`ray up` runs) and by hand for what the README's cluster workflow relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ray.autoscaler._private.util import validate_config

from engine.config import RunConfig
from engine.placement import executor_placement, llm_placement

CLUSTER = Path(__file__).resolve().parent.parent / "cluster.yaml"
LAUNCHER_KEYS = ("cluster_name", "max_workers", "provider", "auth", "available_node_types",
                 "head_node_type", "file_mounts", "setup_commands", "head_start_ray_commands",
                 "worker_start_ray_commands")


@pytest.fixture(scope="module")
def cluster() -> dict[str, Any]:
    config = yaml.safe_load(CLUSTER.read_text())
    assert isinstance(config, dict)
    return config


def test_ray_accepts_it(cluster: dict[str, Any]) -> None:
    validate_config(cluster)  # raises on a schema error, an unknown head type, min > max


def test_keys_the_launcher_needs(cluster: dict[str, Any]) -> None:
    missing = [key for key in LAUNCHER_KEYS if key not in cluster]
    assert not missing, missing
    assert cluster["provider"]["type"] and cluster["auth"]["ssh_user"]
    types = cluster["available_node_types"]
    assert cluster["head_node_type"] in types
    for name, node_type in types.items():
        assert {"resources", "node_config"} <= set(node_type), name
    workers = [t for n, t in types.items() if n != cluster["head_node_type"]]
    assert sum(t.get("max_workers", 0) for t in workers) <= cluster["max_workers"]


def test_node_types_declare_what_placement_asks_for(cluster: dict[str, Any]) -> None:
    types = cluster["available_node_types"]
    head = types[cluster["head_node_type"]]
    assert head["resources"].get("CPU") == 0  # nothing but the driver on the head
    config = RunConfig(llm="vllm:some/model", tp=2, llm_resource="llm",
                       executor_resource="executor", executors=4)
    llm = llm_placement(config, config.llm)
    execs = executor_placement(config)
    gpu_nodes = [t for t in types.values() if t["resources"].get("GPU", 0) >= llm.gpus]
    assert any(t["resources"].get("llm", 0) >= 1 for t in gpu_nodes), "no GPU node has 'llm'"
    assert llm.resources == {"llm": 1.0} and llm.gpus == 2
    assert any(t["resources"].get("executor", 0) >= 1 and t["resources"].get("CPU", 0) >= 1
               for t in types.values()), "no node type offers the 'executor' resource"
    assert execs.resources == {"executor": 1.0}


def test_every_node_installs_the_project_with_vllm(cluster: dict[str, Any]) -> None:
    setup = "\n".join(cluster["setup_commands"])
    assert "[vllm]" in setup and "bubblewrap" in setup
    mounted = list(cluster["file_mounts"].values())
    assert "." in mounted  # the project itself
    assert any("--head" in c for c in cluster["head_start_ray_commands"])
    assert any("$RAY_HEAD_IP" in c for c in cluster["worker_start_ray_commands"])


def test_every_edited_setting_has_a_comment() -> None:
    lines = CLUSTER.read_text().splitlines()
    for key in ("cluster_name", "max_workers", "region", "ssh_user", "InstanceType",
                "ImageId", "min_workers"):
        found = [i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:")]
        assert found, key
        for i in found:
            commented = "#" in lines[i] or lines[i - 1].strip().startswith("#")
            assert commented, f"line {i + 1} ({key}) has no comment"
