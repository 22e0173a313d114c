"""The OpenAI-compatible backend against a local stub server (stdlib http.server in a thread):
429 with Retry-After, 5xx, slow replies past the timeout, refused connections, permanent
failures; token counts from `usage`; and a whole run pointed at the stub in which a failing
generation marks its node `lost` while the run goes on."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from actors.llm import make_llm
from actors.openai_backend import OpenAILLM, retry_after
from common.chat import ChatPrompt
from common.errors import BackendError
from engine.run import main
from tests.reliability._rig import script


@dataclass
class Stub:
    """Answers each POST with the next queued behaviour, else with `default(n)`."""

    queue: deque[dict[str, Any]] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    open_now: int = 0
    most_open: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def default(self, n: int) -> dict[str, Any]:
        return {"body": completion(f"reply {n}")}

    def next(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests.append(request)
            n = len(self.requests)
            return self.queue.popleft() if self.queue else self.default(n)


def completion(text: str, prompt_tokens: int = 11, completion_tokens: int = 7,
               usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "x", "object": "chat.completion", "model": "stub-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}
    return body


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            payload = json.loads(self.rfile.read(length))
            with stub.lock:
                stub.open_now += 1
                stub.most_open = max(stub.most_open, stub.open_now)
            closed = False
            try:
                todo = stub.next({"path": self.path, "headers": dict(self.headers),
                                  "json": payload})
                time.sleep(todo.get("delay", 0.0))
                body = todo.get("body", {})
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                # Closed before the reply is written: once the client reads it, it may send
                # the next request before this thread runs again (seen on a loaded machine).
                with stub.lock:
                    stub.open_now -= 1
                    closed = True
                try:
                    self.send_response(todo.get("status", 200))
                    for key, value in todo.get("headers", {}).items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left
            finally:
                if not closed:
                    with stub.lock:
                        stub.open_now -= 1

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def stub() -> Iterator[Stub]:
    state = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def prompt(tag: str = "draft") -> ChatPrompt:
    return ChatPrompt([{"role": "system", "content": "be brief"},
                       {"role": "user", "content": "hello"}], max_tokens=64,
                      temperature=0.0, seed=5, tag=tag, stop=["```\n"])


def backend(stub: Stub, **options: Any) -> OpenAILLM:
    options = {"backoff": 0.01, "max_backoff": 0.05, "timeout": 5.0, **options}
    llm = make_llm(f"openai:{stub.url}#stub-model", **options)
    assert isinstance(llm, OpenAILLM)
    return llm


def test_request_shape_and_usage(stub: Stub) -> None:
    (reply,) = backend(stub, api_key="sk-test").generate([prompt()])
    assert reply.text == "reply 1" and reply.model == "stub-model"
    assert (reply.prompt_tokens, reply.completion_tokens) == (11, 7)
    assert reply.seconds > 0 and reply.finish_reason == "stop"
    (request,) = stub.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    body = request["json"]
    assert body["model"] == "stub-model" and body["messages"] == prompt().messages
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (64, 0.0, 5)
    assert body["stop"] == ["```\n"]


def test_a_prompt_with_a_reply_start_is_sent_without_its_stop_strings(stub: Stub) -> None:
    # The server writes the whole reply, start included, where the stops (meant for what
    # follows the start) could match at once.
    started = replace(prompt(), reply_start="```python\ndef f(df):\n    df")
    backend(stub).generate([started])
    assert "stop" not in stub.requests[0]["json"]


def test_no_key_sends_no_authorization(stub: Stub) -> None:
    stub.queue.append({"body": completion("x", usage=False)})
    (reply,) = backend(stub).generate([prompt()])
    assert "Authorization" not in stub.requests[0]["headers"]
    assert (reply.prompt_tokens, reply.completion_tokens) == (0, 0)  # the server sent none


def test_429_retry_after_is_honoured(stub: Stub) -> None:
    stub.queue.append({"status": 429, "headers": {"Retry-After": "1"},
                       "body": {"error": {"message": "slow down"}}})
    llm = backend(stub)
    start = time.monotonic()
    (reply,) = llm.generate([prompt()])
    waited = time.monotonic() - start
    assert reply.text == "reply 2" and llm.retries == 1 and len(stub.requests) == 2
    assert waited >= 0.95, waited  # waited as told, not the 0.01 s back-off


def test_5xx_then_success(stub: Stub) -> None:
    stub.queue.extend([{"status": 500, "body": b"boom"}, {"status": 503, "body": b"busy"},
                       {"status": 502, "body": b"bad gateway"}])
    llm = backend(stub)
    (reply,) = llm.generate([prompt()])
    assert reply.text == "reply 4" and llm.retries == 3


def test_slow_reply_times_out_then_retries(stub: Stub) -> None:
    stub.queue.append({"delay": 2.0, "body": completion("too late")})
    llm = backend(stub, timeout=0.5)
    start = time.monotonic()
    (reply,) = llm.generate([prompt()])
    assert reply.text == "reply 2" and llm.retries == 1
    assert time.monotonic() - start < 2.0  # gave up on the slow one instead of waiting


def test_persistent_5xx_fails_clearly_after_the_attempts(stub: Stub) -> None:
    stub.default = lambda n: {"status": 500, "body": {"error": {"message": "model crashed"}}}
    with pytest.raises(BackendError) as info:
        backend(stub, max_attempts=4).generate([prompt()])
    message = str(info.value)
    assert "failed after 4 attempt(s)" in message and "HTTP 500: model crashed" in message
    assert stub.url in message and len(stub.requests) == 4


def test_client_errors_are_not_retried(stub: Stub) -> None:
    stub.queue.append({"status": 404, "body": {"error": {"message": "model 'x' not found"}}})
    with pytest.raises(BackendError, match=r"refused the request .*HTTP 404: model 'x' not found"):
        backend(stub).generate([prompt()])
    assert len(stub.requests) == 1


def test_refused_connection_is_retried_then_fails() -> None:
    llm = make_llm("openai:http://127.0.0.1:9#m", backoff=0.01, max_attempts=3, timeout=2.0)
    with pytest.raises(BackendError, match=r"failed after 3 attempt\(s\).*(Connection|refused)"):
        llm.generate([prompt()])  # type: ignore[union-attr]


def test_retry_after_past_the_deadline_fails_now(stub: Stub) -> None:
    stub.queue.append({"status": 429, "headers": {"Retry-After": "120"}, "body": b"{}"})
    start = time.monotonic()
    with pytest.raises(BackendError, match="would pass the 5s deadline"):
        backend(stub, deadline=5.0).generate([prompt()])
    assert time.monotonic() - start < 3.0


def test_200_without_a_completion_is_a_backend_error(stub: Stub) -> None:
    stub.queue.append({"body": {"unexpected": True}})
    with pytest.raises(BackendError, match="without a chat completion"):
        backend(stub).generate([prompt()])


def test_concurrency_cap(stub: Stub) -> None:
    stub.default = lambda n: {"delay": 0.3, "body": completion(f"r{n}")}
    llm = backend(stub, concurrency=2)
    threads = [threading.Thread(target=llm.generate, args=([prompt()],)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(stub.requests) == 6 and stub.most_open == 2


def test_retry_after_forms() -> None:
    assert retry_after("3") == 3.0 and retry_after(None) is None
    assert retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < (retry_after(later) or 0) <= 30


def test_run_goes_on_when_generations_fail(stub: Stub, tmp_path: Path) -> None:
    """The whole engine on the stub: the first generation fails for good (every attempt a
    500), its node is recorded `lost` with the server's message and proposed again, and the
    run completes with every other node scored and the server's token counts stored."""
    attempts = 6  # the backend's default
    stub.queue.extend({"status": 500, "headers": {"Retry-After": "0"},
                       "body": {"error": {"message": "GPU fell off the bus"}}}
                      for _ in range(attempts))
    stub.default = lambda n: {"body": completion(script(f"s{n}"), 123, 45)}
    rows = "".join(f"{i},{(i * 7) % 5},{i * 0.3 + (i * 7) % 5}\n" for i in range(80))
    (tmp_path / "d.csv").write_text("a,b,y\n" + rows)
    out = tmp_path / "runs"
    code = main(["--data", str(tmp_path / "d.csv"), "--target", "y", "--out", str(out),
                 "--llm", f"openai:{stub.url}#stub-model", "--max-nodes", "4",
                 "--executors", "1", "--llm-concurrency", "1", "--no-baseline", "--quiet",
                 "--budget", "4m", "--no-floor", "--no-ensemble",
                 "--folds", "1"])  # the lost node and the stored tokens: the holdout shows them
    assert code == 0
    (run,) = list(out.iterdir())
    nodes = pd.read_parquet(run / "nodes").sort_values("step")
    lost = nodes[nodes.status == "lost"]
    assert len(lost) == 1, nodes[["operator", "status", "error"]]
    error = lost.error.iloc[0]
    assert error.startswith("LLM call failed: BackendError") and "GPU fell off the bus" in error
    assert f"failed after {attempts} attempt(s)" in error
    ok = nodes[nodes.status == "ok"]
    assert len(ok) == 3 and (ok.prompt_tokens == 123).all() and (ok.completion_tokens == 45).all()
    assert set(ok.model) == {"stub-model"}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["spent"]["lost"] == 1 and manifest["model"] == "stub-model"
