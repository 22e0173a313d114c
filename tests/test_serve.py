"""`python -m engine.serve` over real HTTP: the service runs as its own process on a free port,
and every test talks to it with http.client. Its predictions are engine.predict's, byte for
byte; a bad request is a one-line 4xx that leaves it up; Ctrl-C closes its sandbox sessions."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import engine.serve
from engine import predict
from engine.records.store import RunStore
from engine.serve import _listen, main
from tests.test_outputs import scripted_run

ROWS = 7
_START_SECONDS = 300.0  # the sessions' start replays the answer: tens of seconds on a busy CI
_STOP_SECONDS = 120.0  # a safety net: a stop takes the grace period and the sandbox sweep
# Starts the service with SIGINT ignored, as a script's `&` job (and every child of a test run
# started that way) inherits it; exec keeps the disposition, and no shell reads the paths.
_SIGINT_IGNORED = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                   "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


class Service:
    """`python -m engine.serve RUN --port 0 ...` as a child process, and requests to it; ready
    once it printed its "serving" line (read as it comes, no fixed wait)."""

    def __init__(self, run: Path, *flags: str, sigint_ignored: bool = False) -> None:
        wrapper = [sys.executable, "-c", _SIGINT_IGNORED] if sigint_ignored else [sys.executable]
        self.proc = subprocess.Popen(
            [*wrapper, "-m", "engine.serve", str(run), "--port", "0", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in self.proc.stdout or ()],
                         daemon=True).start()
        self.out: list[str] = []
        while not any("serving" in line for line in self.out):
            try:
                self.out.append(lines.get(timeout=_START_SECONDS))
            except queue.Empty:
                self.stop()
                raise AssertionError(f"the service did not start: {self.out}") from None
            if self.proc.poll() is not None and lines.empty():
                raise AssertionError(f"the service ended: {self.proc.stderr.read()}")  # type: ignore[union-attr]
        self._lines = lines
        match = re.search(r"http://([\d.]+):(\d+)", self.out[-1])
        assert match, self.out
        self.host, self.port = match[1], int(match[2])

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=_START_SECONDS)
        try:
            conn.request(method, path, body=body)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def predict(self, payload: Any) -> tuple[int, Any]:
        return self.request("POST", "/predict", json.dumps(payload).encode())

    def stop(self) -> int:
        """Ctrl-C, then the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=_STOP_SECONDS)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def printed(self) -> str:
        """What it printed on stdout, once it has exited."""
        self.proc.wait(timeout=5)
        while not self._lines.empty():
            self.out.append(self._lines.get())
        return "".join(self.out)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_run(tmp_path_factory)


@pytest.fixture(scope="module")
def service(run_dir: Path) -> Iterator[Service]:
    service = Service(run_dir)
    yield service
    service.stop()


@pytest.fixture(scope="module")
def rows(run_dir: Path) -> pd.DataFrame:
    return RunStore.open(run_dir).load_task().test_X.head(ROWS)


def cli_predictions(run: Path, rows: pd.DataFrame, tmp: Path) -> pd.DataFrame:
    """engine.predict's predictions of `rows`, as the command line writes them."""
    rows.to_csv(tmp / "rows.csv", index=False)
    assert predict.main([str(run), str(tmp / "rows.csv"), "-o", str(tmp / "p.csv")]) == 0
    return pd.read_csv(tmp / "p.csv")


def test_health_names_the_run_and_its_features(service: Service, run_dir: Path) -> None:
    status, health = service.request("GET", "/health")
    assert status == 200
    assert health["run_id"] == run_dir.name and health["task_type"] == "regression"
    assert health["target"] == "y" and health["probabilities"] is False
    assert health["features"] == [{"name": c, "type": "number"} for c in ("a", "b", "c")]
    assert health["sessions"] == 1


def test_predictions_equal_engine_predicts(service: Service, run_dir: Path, rows: pd.DataFrame,
                                           tmp_path: Path) -> None:
    expected = cli_predictions(run_dir, rows, tmp_path).prediction.to_numpy()
    status, body = service.predict(rows.to_dict("records"))
    assert status == 200 and set(body) == {"predictions"}
    assert np.max(np.abs(np.array(body["predictions"]) - expected)) == 0
    # {"rows": [...]}, columns in another order, a target column: the same predictions.
    shuffled = rows[["c", "a", "b"]].assign(y=0.0).to_dict("records")
    status, body = service.predict({"rows": shuffled})
    assert status == 200 and np.max(np.abs(np.array(body["predictions"]) - expected)) == 0


def test_concurrent_requests_each_get_their_own_rows(service: Service,
                                                     rows: pd.DataFrame) -> None:
    singles = [service.predict([row])[1]["predictions"][0] for row in rows.to_dict("records")]
    with ThreadPoolExecutor(ROWS) as pool:
        replies = list(pool.map(lambda row: service.predict([row]), rows.to_dict("records")))
    assert [status for status, _ in replies] == [200] * ROWS
    assert [body["predictions"][0] for _, body in replies] == singles


def _row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"a": 0.5, "b": -1.0, "c": 2.0, **changes}
    return {k: v for k, v in row.items() if v is not ...}


BAD_REQUESTS = {
    "missing column": (json.dumps([_row(), _row(c=...)]).encode(), 400,
                       "row 1: missing column 'c'"),
    "unknown column": (json.dumps([_row(d=1)]).encode(), 400, "unknown column 'd'"),
    "text for a number": (json.dumps({"rows": [_row(b="1.5")]}).encode(), 400,
                          "column 'b': \"1.5\" where the training data had numbers"),
    "nested value": (json.dumps([_row(a=[1])]).encode(), 400, "column 'a': a nested value"),
    "0 rows": (b"[]", 400, "no rows"),
    "0 rows, as an object": (b'{"rows": []}', 400, "no rows"),
    "not rows": (b'{"a": 1}', 400, "send a JSON list of row objects"),
    "a row not an object": (b"[[1, 2, 3]]", 400, "row 0 is not an object"),
    "malformed JSON": (b'[{"a": 1,', 400, "the body is not JSON"),
    "deep list nesting": (b"[" * 50_000 + b"]" * 50_000, 400, "the body is nested too deeply"),
    "deep object nesting": (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, 400,
                            "the body is nested too deeply"),
    "1e400": (b'[{"a": 1e400, "b": -1.0, "c": 2.0}]', 400,
              "row 0, column 'a': inf is not a finite number"),
    "an integer past float64": (b'[{"a": 1' + b"0" * 400 + b', "b": -1.0, "c": 2.0}]', 400,
                                "row 0, column 'a': inf is not a finite number"),
    "NaN literal": (json.dumps([_row(), _row(b=float("nan"))]).encode(), 400,
                    "row 1, column 'b': nan is not a finite number"),
    "not UTF-8": (b"\xff\xfe[", 400, "the body is not JSON"),
    "100 MB body": (b"[" + b" " * 100_000_000 + b"]", 413, "the body is over 10 MB"),
}


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=str)
def test_a_bad_request_is_one_line_4xx_and_the_service_stays_up(service: Service,
                                                                 case: str) -> None:
    body, status, message = BAD_REQUESTS[case]
    got, reply = service.request("POST", "/predict", body)
    assert (got, set(reply)) == (status, {"error"})
    assert message in reply["error"] and "\n" not in reply["error"]
    assert service.request("GET", "/health")[0] == 200
    assert service.predict([_row()])[0] == 200


def test_an_integer_past_int64_is_read_as_a_float_whatever_the_other_rows(
        run_dir: Path) -> None:
    """As an int it made the column uint64 alone and float64 beside a float: two predictions
    of one value."""
    task = RunStore.open(run_dir).load_task()
    big = json.dumps(_row(a=2**63)).encode()
    for body in (b"[" + big + b"]", b"[" + big + b", " + json.dumps(_row()).encode() + b"]"):
        frame = engine.serve.request_rows(body, task)
        assert frame["a"].dtype == np.float64 and frame["a"][0] == 2.0**63


def test_unknown_routes_are_json_errors(service: Service) -> None:
    assert service.request("GET", "/nothing") == (404, {"error": "Not Found"})
    assert service.request("GET", "/predict") == (405, {"error": "Method Not Allowed"})


def _children(pid: int) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == pid:
            found.append(int(entry))
    return found


def test_the_service_sends_replies_without_waiting_for_acks() -> None:
    """The listening socket makes asyncio (uvicorn's loop) turn Nagle off on every connection:
    with it on, a reply's body waited for the client's delayed ACK of the headers, 40 ms a
    request (GET /health took 44 ms, 0.6 ms after)."""
    listener = _listen("127.0.0.1", 0)
    nodelay: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted = transport.get_extra_info("socket")
            nodelay.append(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def accept_one() -> None:
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            for _ in range(100):
                if nodelay:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(accept_one())
    assert nodelay and nodelay[0] != 0


def test_ctrl_c_closes_the_sandbox_session_and_exits_0(run_dir: Path) -> None:
    """Started with SIGINT ignored, as a script's `&` job starts it: a Ctrl-C right after the
    "serving" line, before uvicorn's handlers, was dropped there and the service ran on."""
    service = Service(run_dir, sigint_ignored=True)
    sandboxes = _children(service.proc.pid)
    assert sandboxes, "the session's sandbox is a child of the service"
    code = service.stop()
    assert code == 0, service.proc.stderr.read()  # type: ignore[union-attr]
    assert "stopped; the sandbox sessions are closed" in service.printed()
    assert not [pid for pid in sandboxes if Path(f"/proc/{pid}").exists()]


@pytest.mark.parametrize("inherited", [signal.default_int_handler, signal.SIG_IGN],
                         ids=["SIGINT default", "SIGINT ignored"])
def test_a_ctrl_c_just_after_the_announcement_is_a_normal_stop(
        inherited: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The signal lands between the "serving" line and uvicorn's handlers (a busy machine
    descheduled the service there): still exit 0 with its sessions closed, not "before
    serving" with 130, and uvicorn does not start; also where the command came in with SIGINT
    ignored (a script's `&` job), which dropped it there."""
    closed: list[bool] = []

    class FakeSessions:
        trains_again = False

        def __init__(self, run: Path, count: int) -> None: ...

        def close(self) -> None:
            closed.append(True)

    class Uvicorn:
        class Config:
            def __init__(self, *args: object, **kwargs: object) -> None: ...

        class Server:
            def __init__(self, config: object) -> None:
                raise AssertionError("uvicorn started after the Ctrl-C")

    def print_then_interrupted(*args: object, **kwargs: Any) -> None:
        print(*args, **kwargs)
        if str(args[0]).startswith("serving the answer"):
            signal.raise_signal(signal.SIGINT)  # its handler runs before this returns

    monkeypatch.setattr(engine.serve, "Sessions", FakeSessions)
    monkeypatch.setattr(engine.serve, "build_app", lambda *args: None)
    monkeypatch.setattr(engine.serve, "_uvicorn", lambda: Uvicorn)
    monkeypatch.setattr(engine.serve, "print", print_then_interrupted, raising=False)
    ours = signal.signal(signal.SIGINT, inherited)
    try:
        assert main([str(tmp_path), "--port", "0"]) == 0
        assert signal.getsignal(signal.SIGINT) is inherited  # put back as it came
    finally:
        signal.signal(signal.SIGINT, ours)
    assert closed == [True]
    assert "stopped; the sandbox sessions are closed" in capsys.readouterr().out


def test_a_bad_run_is_one_line_and_exit_not_0(run_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), "--port", "0"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare, ignore=shutil.ignore_patterns("best", "nodes", "plots"))
    assert main([str(bare), "--port", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no best solution" in err
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken, ignore=shutil.ignore_patterns("nodes", "good", "plots"))
    (broken / "best" / "solution.py").write_text("raise RuntimeError('model file gone')\n")
    assert main([str(broken), "--port", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model file gone" in err
    assert main([str(run_dir), "--sessions", "0"]) == 2


@pytest.fixture(scope="module")
def classification_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from engine.api import fit
    from tests.helpers import SCRIPT

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 240))
    frame = pd.DataFrame({"a": a, "b": b, "label": np.where(a + 0.3 * b > 0, "yes", "no")})
    predictor = fit(frame, "label", budget="2m", metric="roc_auc", llm=f"scripted:{SCRIPT}",
                    max_nodes=2, floor=False, ensemble=False,
                    out=tmp_path_factory.mktemp("classification") / "runs")
    return predictor.run_dir


@pytest.mark.slow
def test_classification_labels_and_probabilities_equal_engine_predicts(
        classification_run: Path, tmp_path: Path) -> None:
    rows = RunStore.open(classification_run).load_task().test_X.head(ROWS)
    expected = cli_predictions(classification_run, rows, tmp_path)
    service = Service(classification_run, "--sessions", "2")
    try:
        status, health = service.request("GET", "/health")
        assert status == 200 and health["task_type"] == "binary"
        assert health["probabilities"] is True and health["sessions"] == 2
        status, body = service.predict(rows.to_dict("records"))
        assert status == 200
        assert body["predictions"] == expected.prediction.tolist()
        proba = pd.DataFrame(body["probabilities"])
        assert list(proba.columns) == ["no", "yes"]
        assert np.max(np.abs(proba.to_numpy() - expected[["proba_no", "proba_yes"]]
                             .to_numpy())) == 0
        # Two sessions serve side by side; each reply still answers its own row.
        singles = [service.predict([row])[1] for row in rows.to_dict("records")]
        with ThreadPoolExecutor(ROWS) as pool:
            replies = list(pool.map(lambda r: service.predict([r])[1], rows.to_dict("records")))
        assert replies == singles
    finally:
        assert service.stop() == 0
