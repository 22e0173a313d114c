"""Sandbox sessions against real bubblewrap and real processes: one confined process serves
request after request, a failure is a reply, and a hang or a death ends everything of it."""

from __future__ import annotations

import os
import shutil
import textwrap
import uuid
from pathlib import Path

import pytest

from sandbox import Limits, isolation_mode, start_session
from tests.helpers import processes_with

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Follows the protocol of sandbox/_session.py: reply with the request's rows doubled, this
# process's pid, and whether the project's files are visible; "fail" is an error reply,
# "hang" never replies, "die" ends the process, "link" answers with a symlink. It starts a
# child whose command line holds a marker, to see what is left running.
SERVER = textwrap.dedent("""
    import os, subprocess, sys, time
    reply = os.fdopen(int(os.environ["TREEML_REPLY_FD"]), "w", buffering=1)
    # A child that outlives nothing: closing the session must end it too.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # __MARKER__"])
    for line in sys.stdin:
        n = line.strip()
        data = open(f"input/request-{n}.csv").read()
        print("serving", n, flush=True)
        if data == "fail":
            reply.write("error ValueError: no such rows\\n")
            continue
        if data == "hang":
            time.sleep(600)
        if data == "die":
            raise SystemExit(3)
        os.makedirs(f"submission/reply-{n}")
        target = f"submission/reply-{n}/valid.csv"
        if data == "link":
            os.symlink("/etc/hostname", target)
        else:
            with open(target, "w") as out:
                out.write(f"{data * 2},{os.getpid()},{os.path.exists(__PROJECT__)}")
        reply.write(f"ok {n}\\n")
""")


def server(marker: str) -> str:
    project_file = repr(str(PROJECT_ROOT / "pyproject.toml"))
    return SERVER.replace("__MARKER__", marker).replace("__PROJECT__", project_file)


@needs_bwrap
def test_one_confined_process_serves_every_request() -> None:
    assert isolation_mode() == "bwrap"
    marker = uuid.uuid4().hex
    with start_session(server(marker), {}, Limits(wall_seconds=30)) as session:
        first, second = session.request(b"ab"), session.request(b"xyz")
        assert first.error == "" and second.error == ""
        assert first.csv is not None and second.csv is not None
        rows, pid, project_visible = first.csv.decode().split(",")
        assert rows == "abab" and project_visible == "False"
        assert second.csv.decode().split(",")[:2] == ["xyzxyz", pid]  # the same process
        # Each request's files are cleared when the next one comes: a session stays small.
        assert not (session.workdir / "input" / "request-1.csv").exists()
        workdir = session.workdir
        assert processes_with(marker)
    assert not workdir.exists() and not processes_with(marker)
    assert "serving 1\nserving 2" in session.output_tail()  # all of it drained by the close


@needs_bwrap
def test_an_error_reply_keeps_the_session_and_a_link_is_not_followed() -> None:
    with start_session(server(uuid.uuid4().hex), {}, Limits(wall_seconds=30)) as session:
        failed = session.request(b"fail")
        assert failed.csv is None and failed.error == "ValueError: no such rows"
        linked = session.request(b"link")
        assert linked.csv is None and "no valid.csv" in linked.error
        assert session.alive and session.request(b"ok").csv is not None


@needs_bwrap
def test_a_hang_or_a_death_ends_the_session_and_everything_in_it() -> None:
    marker = uuid.uuid4().hex
    session = start_session(server(marker), {}, Limits(wall_seconds=30))
    hung = session.request(b"hang", timeout=1.0)
    assert hung.csv is None and "no reply within 1 s" in hung.error
    assert not session.alive and not processes_with(marker) and not session.workdir.exists()
    assert "session ended" in session.request(b"ok").error
    with start_session(server(marker), {}, Limits(wall_seconds=30)) as session:
        died = session.request(b"die")
        assert died.csv is None and "exit code" in died.error and not session.alive
    assert not processes_with(marker)


def test_a_closed_session_leaves_no_open_file_in_this_process() -> None:
    before = set(os.listdir("/proc/self/fd"))
    with start_session(server(uuid.uuid4().hex), {}, Limits(wall_seconds=30)) as session:
        assert session.request(b"q").csv is not None
        assert set(os.listdir("/proc/self/fd")) - before  # its pipes, while it is up
    assert set(os.listdir("/proc/self/fd")) - before == set()
