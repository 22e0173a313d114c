"""Any OpenAI-compatible chat server: vLLM's, llama.cpp's, Ollama, hosted APIs.

Plain `POST {base_url}/chat/completions` with the standard library (no client package, so the
backend works on a bare install). Each request is retried on the failures a busy or restarting
server gives (connection errors, timeouts, 408/409/429 and 5xx) with exponential back-off and
full jitter, honouring `Retry-After`; a request that still fails raises `BackendError`, which
the loop records as that node's `lost` status (re-proposed once) while the run goes on.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from common.chat import ChatPrompt, Reply
from common.errors import BackendError

RETRY_STATUS = frozenset({408, 409, 429})  # plus every 5xx


class OpenAILLM:
    """`generate(prompts) -> replies` against `base_url` (e.g. `http://127.0.0.1:8000/v1`).

    `timeout`: seconds one HTTP attempt may take; `deadline`: seconds all attempts of one
    request may take together, back-off included (keep it below the loop's llm_timeout so a
    request fails here, cleanly, before the loop gives up on the actor). `concurrency` caps
    the requests this object has open at once.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 300.0,
        deadline: float = 540.0,
        max_attempts: int = 6,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        concurrency: int = 8,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.deadline = deadline
        self.max_attempts = max(1, max_attempts)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._slots = threading.BoundedSemaphore(max(1, concurrency))
        self._jitter = random.Random()  # de-correlates replicas retrying the same server
        self.retries = 0  # attempts beyond the first, over this object's life (for tests)

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        return [self._complete(prompt) for prompt in prompts]

    def _complete(self, prompt: ChatPrompt) -> Reply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": prompt.messages,
            "max_tokens": prompt.max_tokens,
            "temperature": prompt.temperature,
            "seed": prompt.seed,
        }
        if prompt.stop and not prompt.reply_start:  # this server writes the whole reply
            body["stop"] = prompt.stop
        data = json.dumps(body).encode()
        start = time.monotonic()
        problem = ""
        for attempt in range(self.max_attempts):
            if attempt:
                self.retries += 1
            wait: float | None = None
            try:
                with self._slots:
                    status, headers, payload = self._post(data)
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out
                problem = f"{type(exc).__name__}: {_reason(exc)}"
            else:
                if status == 200:
                    return self._reply(payload, time.monotonic() - start)
                problem = f"HTTP {status}: {_message(payload)}"
                if status not in RETRY_STATUS and status < 500:
                    raise BackendError(f"{self.url} refused the request ({problem}); check the "
                                       "model name, the key (OPENAI_API_KEY) and the URL")
                wait = retry_after(headers.get("Retry-After"))
            if attempt + 1 == self.max_attempts:
                break
            if wait is None:  # full jitter: replicas that failed together spread out
                wait = self._jitter.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))
            if time.monotonic() - start + wait > self.deadline:
                problem += f"; the next try would pass the {self.deadline:g}s deadline"
                break
            time.sleep(wait)
        raise BackendError(f"{self.url} failed after {attempt + 1} attempt(s) in "
                           f"{time.monotonic() - start:.1f}s: {problem}")

    def _post(self, data: bytes) -> tuple[int, Any, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.headers, error.read()

    def _reply(self, payload: bytes, seconds: float) -> Reply:
        try:
            answer = json.loads(payload)
            choice = answer["choices"][0]
            text = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BackendError(f"{self.url} answered 200 without a chat completion: "
                               f"{payload[:200]!r}") from exc
        usage = answer.get("usage") or {}
        return Reply(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            seconds=seconds,
            model=str(answer.get("model") or self.model),
            finish_reason=choice.get("finish_reason") or "stop",
        )


def retry_after(value: str | None) -> float | None:
    """`Retry-After: 3` or an HTTP date -> seconds to wait (None when absent or unreadable)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _message(payload: bytes) -> str:
    """The server's own error text, short: OpenAI-style `{"error": {"message": ...}}` or raw."""
    try:
        error = json.loads(payload).get("error")
        text = error.get("message") if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        text = payload.decode("utf-8", "replace")
    return " ".join(str(text).split())[:200]


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)  # URLError wraps the socket error
    if isinstance(reason, socket.timeout | TimeoutError):
        return "timed out"
    return " ".join(str(reason or exc).split())[:200]
