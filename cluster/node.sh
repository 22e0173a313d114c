#!/usr/bin/env bash
# One node of a treeml Ray cluster: the setup and start commands of both cluster files
# (cluster.yaml for a cloud, cluster-local.yaml for machines you have), so the file CI runs
# and the file that rents GPUs run the same lines. The project is at ~/treeml (file_mounts).
#
#   node.sh setup [EXTRAS]   bubblewrap and python3-venv if missing, then the project with its
#                            EXTRAS (e.g. vllm) and ray[default] into ~/venv, and ~/venv/bin
#                            on the login PATH
#   node.sh head             (re)start Ray as the head: no CPUs, so only the driver runs there
#   node.sh worker [ROLES]   (re)start Ray as a worker of the head at $RAY_HEAD_IP
#   node.sh stop-workers     on the head of a local-provider cluster, before `ray down`: stop
#                            Ray on every worker (`ray down` stops the head's only; a cloud's
#                            workers go with their instances)
#
# ROLES, for Ray's local provider only, say which custom resources each worker declares, by
# the address it has in provider.worker_ips: "10.0.0.2=executor:8 10.0.0.3=llm:1,executor:2".
# That worker's Ray node then also takes that address as its own. The cloud file declares
# resources per node type instead, and the autoscaler hands them to `ray start`.
set -euo pipefail

die() { echo "node.sh: $*" >&2; exit 2; }

setup() {
    local extras="${1:-}" sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    if ! command -v bwrap >/dev/null || ! python3 -c 'import ensurepip' 2>/dev/null; then
        $sudo apt-get update -q && $sudo apt-get install -y -q bubblewrap python3-venv
    fi
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "python3 on this node is $(python3 -V 2>&1); treeml needs >= 3.11:" \
               "use an image that has it"
    python3 -m venv ~/venv
    ~/venv/bin/pip install -q --upgrade pip
    # ray[default] adds the dashboard, `ray status` and `ray list`: how a cluster is watched.
    # Compiled on every core after the install (pip compiles on one): executors run candidates
    # with the venv read-only, so it must be compiled before. A file that does not compile is
    # skipped.
    # The local extra's llama-cpp-python is built as setup.sh builds it (llama-build.sh).
    source "$HOME/treeml/llama-build.sh"
    CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }$LLAMA_CMAKE_ARGS" \
        ~/venv/bin/pip install -q --no-compile -e "$HOME/treeml${extras:+[$extras]}" "ray[default]"
    ~/venv/bin/python -m compileall -qq -j 0 \
        "$(~/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
    grep -qs 'venv/bin' ~/.bashrc || echo 'export PATH="$HOME/venv/bin:$PATH"' >> ~/.bashrc
}

# The resources of `address` in ROLES as Ray's JSON, e.g. {"executor": 8}.
resources_of() {
    local roles="$1" address="$2" entry pair json=""
    for entry in $roles; do
        [ "${entry%%=*}" = "$address" ] || continue
        IFS=, read -ra pairs <<< "${entry#*=}"
        for pair in "${pairs[@]}"; do
            [[ "$pair" =~ ^[A-Za-z_][A-Za-z0-9_]*:[0-9]+$ ]] \
                || die "role '$pair' of $address is not NAME:COUNT (e.g. executor:8)"
            json+="${json:+, }\"${pair%%:*}\": ${pair#*:}"
        done
        echo "{$json}"
        return
    done
    die "worker $address has no role: add '$address=executor:N' or '$address=llm:N' to the" \
        "worker start command of the cluster file"
}

head() {
    ~/venv/bin/ray stop
    ulimit -n 65536 2>/dev/null || true  # many actors, many sockets; a lower hard limit is kept
    ~/venv/bin/ray start --head --port=6379 --num-cpus=0 \
        --autoscaling-config="$HOME/ray_bootstrap_config.yaml" --dashboard-host=127.0.0.1
}

worker() {
    local roles="${1:-}" options=()
    [ -n "${RAY_HEAD_IP:-}" ] || die "RAY_HEAD_IP is not set: run this through ray up"
    if [ -n "$roles" ]; then
        # The address the launcher reached this node at (sshd's view): the one listed.
        local address
        address="$(echo "${SSH_CONNECTION:-}" | cut -d' ' -f3)"
        [ -n "$address" ] || die "no SSH_CONNECTION: run this through ray up"
        options=(--node-ip-address="$address" --resources="$(resources_of "$roles" "$address")")
    fi
    ~/venv/bin/ray stop
    ulimit -n 65536 2>/dev/null || true
    ~/venv/bin/ray start --address="$RAY_HEAD_IP:6379" "${options[@]}"
}

stop_workers() {
    local config="$HOME/ray_bootstrap_config.yaml" user key ips address
    [ -f "$config" ] || die "no $config: run this on the head, through ray exec"
    read -r user key ips < <(~/venv/bin/python -c 'import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
print(c["auth"]["ssh_user"], c["auth"]["ssh_private_key"], *c["provider"].get("worker_ips", []))
' "$config")
    for address in $ips; do
        echo "stopping Ray on $address"
        ssh -i "${key/#\~/$HOME}" -o BatchMode=yes -o IdentitiesOnly=yes \
            -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
            "$user@$address" '~/venv/bin/ray stop'
    done
}

case "${1:-}" in
    setup) setup "${2:-}" ;;
    head) head ;;
    worker) worker "${2:-}" ;;
    stop-workers) stop_workers ;;
    *) die "usage: node.sh setup [EXTRAS] | head | worker [ROLES] | stop-workers" ;;
esac
