"""LLM backends behind one narrow interface, chosen by a spec string.

`generate(prompts) -> replies` is all the loop needs. Specs: `llama` (embedded default,
optionally `llama:/path/model.gguf`), `scripted:FILE` (replays replies for tests). Heavy
libraries are imported inside the backend that needs them, with an error naming the extra.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from search.chat import ChatPrompt, Reply
from search.errors import UserError


class LLM(Protocol):
    model: str

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]: ...


RAISE = "__raise__"  # a scripted reply that makes the backend raise
HANG = "__hang__"  # a scripted reply that makes the backend never return


class ScriptedLLM:
    """Replays replies from a JSON file: `{"draft": [...], "debug": [...], "improve": [...]}`,
    keyed by operator (the sela policy also asks for `"insights"` and `"sela"`).

    Each operator's list is consumed in order and the last reply repeats once it runs out.
    Optional `"delay": seconds` simulates generation time. Used by tests and benchmarks.
    Two reply values simulate a broken backend (fault tests): `"__raise__"` raises
    RuntimeError, `"__hang__"` never returns (the loop's llm_timeout must end it).
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"scripted LLM file {path} not found; pass --llm scripted:FILE.json")
        try:
            script = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"scripted LLM file {path} is not valid JSON: {exc}") from exc
        self.delay = float(script.pop("delay", 0.0))
        self.replies: dict[str, list[str]] = {k: list(v) for k, v in script.items()}
        self.model = f"scripted:{path.name}"
        self._used: dict[str, int] = {}
        self._lock = threading.Lock()  # an actor may serve several requests at once

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        replies = []
        for prompt in prompts:
            start = time.perf_counter()
            if self.delay:
                time.sleep(self.delay)
            options = self.replies.get(prompt.tag) or self.replies.get("default") or [""]
            with self._lock:
                index = self._used.get(prompt.tag, 0)
                self._used[prompt.tag] = index + 1
            text = options[min(index, len(options) - 1)]
            if text == RAISE:
                raise RuntimeError("scripted backend error")
            if text == HANG:
                while True:
                    time.sleep(3600)
            prompt_tokens = sum(len(m["content"].split()) for m in prompt.messages)
            replies.append(
                Reply(text, prompt_tokens, len(text.split()), time.perf_counter() - start,
                      self.model)
            )
        return replies


BackendFactory = Callable[[str, dict[str, object]], LLM]


def _scripted(arg: str, options: dict[str, object]) -> LLM:
    return ScriptedLLM(arg)


def _llama(arg: str, options: dict[str, object]) -> LLM:
    from actors.llama_backend import LlamaLLM

    options.setdefault("model_path", arg or None)
    return LlamaLLM(**options)  # type: ignore[arg-type]


BACKENDS: dict[str, BackendFactory] = {"scripted": _scripted, "llama": _llama}


def parse_spec(spec: str) -> tuple[str, str]:
    """`"llama"` -> ("llama", ""); `"scripted:replies.json"` -> ("scripted", "replies.json")."""
    kind, _, arg = spec.partition(":")
    if kind not in BACKENDS:
        raise UserError(
            f"unknown LLM spec {spec!r}; use one of: llama, llama:/path/model.gguf, scripted:FILE"
        )
    if kind == "scripted" and not arg:
        raise UserError("--llm scripted needs a file: --llm scripted:replies.json")
    return kind, arg


def make_llm(spec: str, **options: object) -> LLM:
    kind, arg = parse_spec(spec)
    return BACKENDS[kind](arg, dict(options))
