"""Three machines on one host for `ray up cluster-local.yaml`, run by tests/test_cluster_up.py.

`python -m tests.local_cluster rig WORK` runs inside `unshare --net --pid --mount`: a
private loopback network, process table and mount table, so nothing here can reach or outlive
into the host (other Ray clusters on it included: `ray stop` kills every Ray process it sees).
Each machine is an sshd on its own loopback address, 127.0.0.1 (head), 127.0.0.2 and
127.0.0.3, in its own PID and mount namespaces with its own home (root's, through a private
/etc/passwd), /tmp, /run and /dev/shm: `ray stop` on one machine stops only that machine's
Ray, as on real hosts. The client (where `ray up` runs) has a home of its own too. Machines
install the project offline from WORK/wheels (sshd's SetEnv points pip there), the way a LAN
without internet uses a wheel mirror.

The host's /tmp and /mnt are hidden from the rig, but the checkout and the Python running the
rig (its venv, often the checkout's .venv) stay where they are wherever they live, under /tmp or
under a path with a space included: see private_mounts. `python -m tests.local_cluster mounts
WORK` sets up those mounts alone and writes what the client sees to WORK/mounts.json
(tests/test_local_cluster.py runs it from a copy of the checkout under /tmp). The rig needs
`NEEDS` from the host; without it the rig says so in one line (`host_lacks`).

The rig then runs the README's cluster commands (`COMMANDS`) on a copy of what `ray up` sends
of the checkout (client_checkout) and writes WORK/result.json: each command's exit code and
seconds, the cluster's nodes and where actors ran, each run brought back (manifest result,
nodes from Parquet), and every process left on each machine after `ray down` and in the whole
namespace at the end.
`python -m tests.local_cluster facts`, run on the head through `ray exec`, prints the
cluster's nodes and actors as JSON.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parent.parent
MACHINES = {"head": "127.0.0.1", "executor": "127.0.0.2", "llm": "127.0.0.3"}
RIG_MNT = Path("/mnt")  # a private tmpfs in the rig, made before the host's /tmp is hidden
MNT = RIG_MNT / "work"  # WORK, seen the same way by every machine (its own tmp is hidden)
SOURCE = RIG_MNT / "source"  # the checkout at a fixed path: the lower layer of client_checkout
HOST = RIG_MNT / "host"  # what kept_host_paths finds, bound here while the host's /tmp was seen
CLIENT_CHECKOUT = RIG_MNT / "checkout"  # where the client runs the commands: see client_checkout
HIDDEN = (Path("/tmp"), RIG_MNT)  # the host's folders the rig hides
NEEDS = ("root, unshare with network, PID and mount namespaces, overlayfs, and openssh-server,"
         " rsync, iproute2 (.ci/run installs those three)")
TOOLS = ("unshare", "mount", "/usr/sbin/sshd", "ssh-keygen", "rsync", "ip")
# The README's cluster commands, as run here (tests/test_cluster_yaml.py finds them there). The
# run ends at 8 nodes, not by its clock: a loaded machine must change only how long it
# takes, not what it scores (90 s of a busy machine scored 4 nodes where the test asks for 5).
UP = "ray up -y cluster-local.yaml"
RUN = ("ray exec cluster-local.yaml 'cd ~/treeml && python -m engine.run --address auto"
       " --data benchmarks/data/penguins/penguins.csv --target species"
       " --llm scripted:$HOME/treeml/tests/data/scripted_cluster.json --executors 2"
       " --executor-resource executor --llm-resource llm --max-nodes 8 --budget 5m --quiet'")
RSYNC = "ray rsync-down cluster-local.yaml '~/treeml/runs/' ./runs/"
STOP = "ray exec cluster-local.yaml 'bash ~/treeml/cluster/node.sh stop-workers'"
DOWN = "ray down -y cluster-local.yaml"
COMMANDS = (UP, RUN, RSYNC, STOP, DOWN)


def declared_roles(config: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{worker address: resources} as cluster/node.sh reads them from a local-provider file's
    worker start command (`node.sh worker 'ADDRESS=NAME:COUNT[,NAME:COUNT] ...'`)."""
    for command in config["worker_start_ray_commands"]:
        words = shlex.split(command)
        if "worker" in words and len(words) > words.index("worker") + 1:
            roles = words[words.index("worker") + 1]
            return {entry.split("=")[0]: {name: float(count) for name, count in
                                          (pair.split(":") for pair in entry.split("=")[1]
                                           .split(","))}
                    for entry in roles.split()}
    return {}


def sh(*args: str) -> None:
    subprocess.run(args, check=True)


class HostUnfit(Exception):
    """The host cannot run the rig: one line saying what it lacks."""


def host_lacks() -> str | None:
    """What this host lacks to run the rig, in one line; None when it has everything."""
    if os.geteuid() != 0:
        return f"the cluster rig needs {NEEDS}: run it as root"
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        return f"the cluster rig needs {NEEDS}: {', '.join(missing)} not found"
    probe = subprocess.run(["unshare", "--net", "--pid", "--mount", "--fork", "true"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return (f"the cluster rig needs {NEEDS}: unshare is refused here"
                f" ({probe.stderr.strip() or f'exit {probe.returncode}'})")
    return None


def kept_host_paths() -> list[Path]:
    """The checkout and the Python running the rig (its venv, the interpreter under it) where
    hiding /tmp or /mnt would hide them, outermost only. The rig binds them back at their own
    paths: the venv's scripts name its python by absolute path (`#!`), and the rig imports from
    the checkout."""
    paths = {Path(p).resolve() for p in (CHECKOUT, sys.prefix, sys.base_prefix)}
    hidden = {p for p in paths if any(p.is_relative_to(folder) for folder in HIDDEN)}
    kept = sorted(p for p in hidden if not any(p != q and p.is_relative_to(q) for q in hidden))
    for path in kept:
        if path in HIDDEN or any(path.is_relative_to(own)
                                 for own in (MNT, SOURCE, HOST, CLIENT_CHECKOUT)):
            raise HostUnfit(f"the cluster rig hides {path} and keeps {RIG_MNT}'s {MNT.name},"
                            f" {SOURCE.name}, {HOST.name} and {CLIENT_CHECKOUT.name} for itself:"
                            " move the checkout or its venv elsewhere")
    return kept


def private_mounts(work: Path) -> None:
    """WORK at /mnt/work and the checkout at /mnt/source, then a private /tmp: the client's Ray
    state and ssh sockets die here. Everything the rig needs from the host is bound onto a
    fresh tmpfs first, which then becomes /mnt, so hiding /tmp or /mnt hides none of it; what
    kept_host_paths finds is then bound back at its own path, in the private /tmp or /mnt."""
    kept = kept_host_paths()
    stage = work / "stage"  # any folder works: the tmpfs moves to /mnt before anything is hidden
    stage.mkdir()
    sh("mount", "-t", "tmpfs", "tmpfs", str(stage))
    staged = {path: HOST / str(i) for i, path in enumerate(kept)}
    for source, target in [(work, MNT), (CHECKOUT, SOURCE), *staged.items()]:
        seen_at = stage / target.relative_to(RIG_MNT)
        seen_at.mkdir(parents=True)
        sh("mount", "--bind", str(source), str(seen_at))
    sh("mount", "--move", str(stage), str(RIG_MNT))
    sh("mount", "-t", "tmpfs", "tmpfs", "/tmp")
    for path, target in staged.items():
        path.mkdir(parents=True)
        sh("mount", "--bind", str(target), str(path))


def sent_files() -> list[str]:
    """rsync's options for what `ray up` sends of the checkout: cluster-local.yaml's
    rsync_exclude and rsync_filter, as Ray's command runner passes them to rsync."""
    import yaml

    config = yaml.safe_load((SOURCE / "cluster-local.yaml").read_text())
    return ([f"--exclude={pattern}" for pattern in config.get("rsync_exclude", [])]
            + [f"--filter=dir-merge,- {name}" for name in config.get("rsync_filter", [])])


def client_checkout() -> Path:
    """The checkout as the client sees it: an overlay, so what the commands write there (the
    README's `./runs/`) lands in WORK, never in the real checkout. Its lower layer is a copy of
    what `ray up` sends (no venvs, nothing git ignores), taken once: `ray up` hashes every file
    under its file_mounts before it copies them, and processes beside the rig (another test
    suite's bytecode, AutoGluon's CatBoost folder) make and remove files in the real checkout.
    The copy lives at a fixed path: overlayfs options cannot hold every path (a comma, a
    colon)."""
    layers = {name: MNT / "overlay" / name for name in ("lower", "upper", "work")}
    for layer in layers.values():
        layer.mkdir(parents=True)
    done = subprocess.run(["rsync", "-a", *sent_files(), f"{SOURCE}/", f"{layers['lower']}/"],
                          capture_output=True, text=True, check=False)
    if done.returncode not in (0, 24):  # 24: a file vanished while copied (one of those above)
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    merged = CLIENT_CHECKOUT
    merged.mkdir()
    sh("mount", "-t", "overlay", "overlay", "-o",
       f"lowerdir={layers['lower']},upperdir={layers['upper']},workdir={layers['work']}",
       str(merged))
    return merged


def passwd_with_home(home: Path) -> Path:
    """/etc/passwd with root's home moved to `home` (sshd and ssh read `~` from there, not from
    $HOME); bound over /etc/passwd inside a machine's mount namespace only."""
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == "root":
            fields[5] = str(home)
        lines.append(":".join(fields) + "\n")
    copy = home.parent / "passwd"
    copy.write_text("".join(lines))
    return copy


def make_keys() -> Path:
    """The client's key at ~/.ssh/treeml_cluster, as cluster-local.yaml names it."""
    client = MNT / "client" / "home"
    (client / ".ssh").mkdir(parents=True)
    sh("mount", "--bind", str(passwd_with_home(client)), "/etc/passwd")
    key = client / ".ssh" / "treeml_cluster"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(MNT / "host_key"))
    (MNT / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
    return client


def start_machine(name: str, address: str) -> subprocess.Popen[bytes]:
    root = MNT / name
    (root / "home").mkdir(parents=True)
    (root / "home" / ".bashrc").write_text("")
    config = root / "sshd_config"
    config.write_text(f"""ListenAddress {address}:22
HostKey {MNT / 'host_key'}
PidFile none
AuthorizedKeysFile {MNT / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 50
MaxStartups 50
SetEnv PIP_NO_INDEX=1 PIP_FIND_LINKS={MNT / 'wheels'}
""")
    passwd = passwd_with_home(root / "home")
    boot = (f"mount --bind {passwd} /etc/passwd && mount -t tmpfs tmpfs /tmp"
            " && mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /dev/shm"
            f" && mkdir -m 755 /run/sshd && exec /usr/sbin/sshd -D -e -f {config}")
    log = (root / "sshd.log").open("wb")
    return subprocess.Popen(["unshare", "--pid", "--mount", "--fork", "--kill-child",
                             "--mount-proc", "sh", "-c", boot], stdout=log, stderr=log)


def wait_for_port(address: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def ray(client: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """A `ray` CLI command from the client machine, as a user would type it; its output goes
    to WORK/logs/ (readable from the host while it runs) and comes back in `stdout`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(client)
    command = [str(Path(sys.executable).parent / "ray"), *args]
    logs = MNT / "logs"
    logs.mkdir(exist_ok=True)
    log = logs / f"{len(list(logs.iterdir())):02d}-{args[0]}.log"
    with log.open("w") as out:
        out.write("$ ray " + " ".join(args) + "\n")
        out.flush()
        done = subprocess.run(command, cwd=CLIENT_CHECKOUT, env=env, stdout=out,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
    return subprocess.CompletedProcess(command, done.returncode, log.read_text(), "")


def facts(client: Path) -> dict[str, Any]:
    done = ray(client, "exec", "cluster-local.yaml",
               "cd ~/treeml && python -m tests.local_cluster facts")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if done.returncode == 0 and lines else {}


def live_processes() -> list[tuple[int, str, str]]:
    """(pid, PID namespace, command line) of every live process here but the rig itself."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            space = os.readlink(f"/proc/{entry}/ns/pid")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        if state != "Z":
            found.append((int(entry), space, cmdline.strip()))
    return found


def processes_by_machine(sshd: dict[str, int]) -> dict[str, list[str]]:
    """Command lines of every live process of each machine but its sshd and that sshd's
    sessions (the client's ssh connections linger for ControlPersist, 10 s)."""
    spaces = {os.readlink(f"/proc/{pid}/ns/pid"): name for name, pid in sshd.items()}
    found: dict[str, list[str]] = {name: [] for name in sshd}
    for _, space, cmdline in live_processes():
        if space in spaces and not cmdline.startswith("sshd: "):
            found[spaces[space]].append(cmdline)
    return found


def child_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])


def step(result: dict[str, Any], name: str, client: Path, command: str) -> bool:
    """One README command, timed; False when it failed."""
    start = time.monotonic()
    done = ray(client, *shlex.split(command)[1:])
    result["steps"][name] = {"rc": done.returncode, "seconds": time.monotonic() - start}
    return done.returncode == 0


def rig(work: Path) -> None:
    """Writes what happened to WORK/result.json."""
    result: dict[str, Any] = {"netns": os.readlink("/proc/self/ns/net"), "steps": {}}
    sh("ip", "link", "set", "lo", "up")
    private_mounts(work)
    client = make_keys()
    client_checkout()
    machines = {name: start_machine(name, address) for name, address in MACHINES.items()}
    try:
        for address in MACHINES.values():
            wait_for_port(address, 22)
        sshd = {name: child_of(p.pid) for name, p in machines.items()}
        start = time.monotonic()
        if step(result, "ray up", client, UP):
            # `ray up` returns once the head is up; the head's autoscaler then starts workers.
            while time.monotonic() - start < 600:
                result["nodes"] = facts(client).get("nodes", [])
                if sum(n["alive"] for n in result["nodes"]) == len(MACHINES):
                    break
                time.sleep(5)
            result["up_seconds"] = time.monotonic() - start
            if step(result, "run", client, RUN):
                result["actors"] = facts(client).get("actors", [])
            if step(result, "rsync-down", client, RSYNC):
                result["runs"] = stored_runs(MNT / "overlay" / "upper" / "runs")
        start = time.monotonic()
        step(result, "stop-workers", client, STOP)
        step(result, "ray down", client, DOWN)
        result["down_seconds"] = time.monotonic() - start
        result["left_after_down"] = processes_by_machine(sshd)
    finally:
        for p in machines.values():
            if p.poll() is None:
                os.kill(child_of(p.pid), signal.SIGTERM)  # sshd: its namespace goes with it
        for p in machines.values():
            p.wait(timeout=60)
        # The client's ssh control masters (Ray's, `ssh: ... [mux]`) outlive their last session
        # by ControlPersist (10 s) when the machine they reach is gone without a word: wait
        # that out, then whatever is left stayed behind.
        deadline = time.monotonic() + 20
        while (left := live_processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        result["left_at_end"] = [cmdline for _, _, cmdline in left]
        (MNT / "result.json").write_text(json.dumps(result, indent=1))


def stored_runs(runs: Path) -> list[dict[str, Any]]:
    """Each run directory brought back: its manifest's result and its nodes from Parquet."""
    from engine.records.store import RunStore

    found = []
    for run_dir in sorted(p for p in runs.glob("*") if (p / "manifest.json").exists()):
        nodes, _ = RunStore.open(run_dir).read_nodes()
        manifest = json.loads((run_dir / "manifest.json").read_text())
        found.append({"run": run_dir.name, "result": manifest.get("result", {}),
                      "isolation": manifest.get("isolation"),
                      "nodes": [{"status": n.status.value, "operator": n.operator.value,
                                 "executor": n.executor, "node_ip": n.node_ip,
                                 "llm_actor": n.llm_actor} for n in nodes]})
    return found


def print_facts() -> None:
    import ray
    from ray.util.state import list_actors

    ray.init(address="auto", log_to_driver=False)
    ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    nodes = [{"ip": n["NodeManagerAddress"], "alive": n["Alive"], "resources": n["Resources"]}
             for n in ray.nodes()]
    actors = [{"class": a.class_name, "state": a.state, "ip": ips.get(a.node_id, "")}
              for a in list_actors(detail=True, limit=1000)]
    print(json.dumps({"nodes": nodes, "actors": actors}))


def what_the_client_sees(work: Path) -> None:
    """The rig's mounts alone (run inside `unshare --mount`), then WORK/mounts.json: the host's
    /tmp as the client sees it, whether the checkout and the Python running the rig still work
    at their own paths, and the checkout through client_checkout, where the client writes a
    file (runs/probe) that must land in WORK."""
    private_mounts(work)
    client_checkout()
    (CLIENT_CHECKOUT / "runs").mkdir(exist_ok=True)
    (CLIENT_CHECKOUT / "runs" / "probe").write_text("written by the client")
    python = subprocess.run([sys.executable, "-c", "import tests.local_cluster"], cwd=CHECKOUT,
                            capture_output=True, text=True, check=False)
    seen = {"tmp": sorted(os.listdir("/tmp")),
            "beside_checkout": sorted(os.listdir(CHECKOUT.parent)),
            "checkout": sorted(os.listdir(CHECKOUT)),
            "client_checkout": sorted(os.listdir(CLIENT_CHECKOUT)),
            "client_tests": sorted(os.listdir(CLIENT_CHECKOUT / "tests")),
            "python": {"rc": python.returncode, "stderr": python.stderr}}
    (MNT / "mounts.json").write_text(json.dumps(seen, indent=1))


if __name__ == "__main__":
    try:
        if sys.argv[1] == "facts":
            print_facts()
        elif sys.argv[1] == "mounts":
            what_the_client_sees(Path(sys.argv[2]))
        else:
            rig(Path(sys.argv[2]))
    except HostUnfit as unfit:
        sys.exit(f"tests.local_cluster: {unfit}")
    except subprocess.CalledProcessError as failed:
        sys.exit(f"tests.local_cluster: {shlex.join(failed.cmd)} failed (exit"
                 f" {failed.returncode}): the cluster rig needs {NEEDS}")
