"""cluster.yaml (a cloud) and cluster-local.yaml (machines you have: Ray's local provider) are
valid Ray cluster-launcher configs with the node roles the engine's placement flags expect:
checked with Ray's own validator (its JSON schema plus the checks `ray up` runs) and by hand
for what the README's cluster workflow relies on. Both run the same setup and start commands,
cluster/node.sh, so the file CI runs for real (tests/test_cluster_up.py) and the cloud file
cannot drift apart; the README shows the commands that test runs."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from engine.config import RunConfig
from engine.placement import executor_placement, llm_placement
from tests.local_cluster import COMMANDS, declared_roles

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "cluster.yaml"
LOCAL = ROOT / "cluster-local.yaml"
NODE_SH = ROOT / "cluster" / "node.sh"
SHARED = "bash ~/treeml/cluster/node.sh"
LAUNCHER_KEYS = ("cluster_name", "max_workers", "provider", "auth", "available_node_types",
                 "head_node_type", "file_mounts", "setup_commands", "head_start_ray_commands",
                 "worker_start_ray_commands")


@pytest.fixture(scope="module")
def cluster() -> dict[str, Any]:
    config = yaml.safe_load(CLUSTER.read_text())
    assert isinstance(config, dict)
    return config


@pytest.fixture(scope="module")
def local() -> dict[str, Any]:
    config = yaml.safe_load(LOCAL.read_text())
    assert isinstance(config, dict)
    return config


def test_ray_accepts_it(cluster: dict[str, Any]) -> None:
    validate_config(cluster)  # raises on a schema error, an unknown head type, min > max


@pytest.mark.parametrize("path", [CLUSTER, LOCAL], ids=lambda p: p.name)
def test_ray_accepts_both_as_ray_up_prepares_them(path: Path) -> None:
    # Defaults filled in and, for the local provider, its one node type made: what `ray up` does.
    validate_config(prepare_config(yaml.safe_load(path.read_text())))


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
    assert cluster["setup_commands"] == [f"{SHARED} setup vllm"]
    script = NODE_SH.read_text()
    assert "bubblewrap" in script and '"$HOME/treeml${extras:+[$extras]}"' in script
    assert "ray[default]" in script  # the dashboard the head start asks for, `ray status`
    mounted = list(cluster["file_mounts"].values())
    assert "." in mounted  # the project itself
    head = script[script.index("head() {"):]
    assert all(flag in head for flag in ("--head", "--num-cpus=0", "--autoscaling-config"))
    assert '--address="$RAY_HEAD_IP:6379"' in script


def verbs(commands: list[str]) -> list[str]:
    """The node.sh verb of each command, which must be node.sh and nothing more (environment
    assignments before it aside)."""
    found = []
    for command in commands:
        assert SHARED in command, command
        before, after = command.split(SHARED)
        assert all("=" in word for word in shlex.split(before)), command
        found.append(shlex.split(after)[0])
    return found


@pytest.mark.parametrize("path", [CLUSTER, LOCAL], ids=lambda p: p.name)
def test_both_files_run_the_shared_node_commands(path: Path) -> None:
    config = yaml.safe_load(path.read_text())
    assert verbs(config["setup_commands"]) == ["setup"]
    assert verbs(config["head_start_ray_commands"]) == ["head"]
    assert verbs(config["worker_start_ray_commands"]) == ["worker"]
    for key in ("initialization_commands", "head_setup_commands", "worker_setup_commands"):
        assert not config.get(key), key  # a command here would run on one file's nodes only
    script = NODE_SH.read_text()
    for verb in ("setup", "head", "worker", "stop-workers"):
        assert f"\n    {verb}) " in script, verb
    subprocess.run(["bash", "-n", str(NODE_SH)], check=True)


def test_the_local_file_has_the_cloud_roles(local: dict[str, Any],
                                            cluster: dict[str, Any]) -> None:
    assert local["provider"]["type"] == "local"
    roles = declared_roles(local)
    assert sorted(roles) == sorted(local["provider"]["worker_ips"]), "a worker without a role"
    assert local["provider"]["head_ip"] not in roles
    config = RunConfig(llm="scripted:replies.json", llm_resource="llm",
                       executor_resource="executor", executors=2)
    llm = llm_placement(config, config.llm).resources
    execs = executor_placement(config).resources
    assert any(r.get("llm", 0) >= llm["llm"] and "executor" not in r for r in roles.values())
    assert sum(r.get("executor", 0) for r in roles.values()) >= config.executors * execs[
        "executor"]
    for key in ("file_mounts", "rsync_exclude", "rsync_filter"):
        assert local[key] == cluster[key], key


def test_node_sh_refuses_a_worker_without_a_role(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "RAY_HEAD_IP": "10.0.0.1",
           "SSH_CONNECTION": "10.0.0.1 50000 10.0.0.3 22"}
    for roles, message in (("10.0.0.2=executor:2", "worker 10.0.0.3 has no role"),
                           ("10.0.0.3=executor:many", "role 'executor:many' of 10.0.0.3")):
        done = subprocess.run(["bash", str(NODE_SH), "worker", roles], env=env,
                              capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr, done
        assert len(done.stderr.splitlines()) == 1 and not done.stdout  # before any `ray stop`


def test_readme_shows_the_commands_the_cluster_test_runs() -> None:
    def flat(text: str) -> str:
        return " ".join(text.replace("\\\n", " ").split())

    readme = flat((ROOT / "README.md").read_text())
    for command in COMMANDS:
        assert flat(command) in readme, command


def test_every_edited_setting_has_a_comment() -> None:
    lines = CLUSTER.read_text().splitlines()
    for key in ("cluster_name", "max_workers", "region", "ssh_user", "InstanceType",
                "ImageId", "min_workers"):
        found = [i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:")]
        assert found, key
        for i in found:
            commented = "#" in lines[i] or lines[i - 1].strip().startswith("#")
            assert commented, f"line {i + 1} ({key}) has no comment"
