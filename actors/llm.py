"""LLM backends behind one narrow interface, chosen by a spec string, routed by operator.

`generate(prompts) -> replies` is all the loop needs; a backend that serves many requests at
once in one event loop (vLLM) offers `agenerate` instead and runs in an async actor. Specs:

    llama                        embedded llama.cpp with the default GGUF
    llama:/path/model.gguf       embedded llama.cpp with another GGUF
    vllm:<model-or-path>         vLLM engine in the actor (GPUs, tensor parallel, prefix cache)
    openai:<base_url>#<model>    any OpenAI-compatible server (/v1/chat/completions)
    scripted:FILE.json           replays replies, for tests
    none                         no LLM at all: the engine's floor alone (the LLM-gain arm)

`--llm` holds one spec, or several routed by operator (see `parse_routes`):
`draft,improve=vllm:big;debug=vllm:small` (`none` stands alone). Heavy libraries are imported
inside the backend that needs them, with an error naming the extra.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from common.chat import ChatPrompt, Reply
from common.errors import UserError
from search.node import Operator


class LLM(Protocol):
    model: str

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]: ...


class AsyncLLM(Protocol):
    """A backend that batches concurrent requests itself (continuous batching)."""

    model: str

    async def agenerate(self, prompts: list[ChatPrompt]) -> list[Reply]: ...


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


BackendFactory = Callable[[str, dict[str, object]], "LLM | AsyncLLM"]


@dataclass(frozen=True)
class Backend:
    """How to build one kind of backend and how its actors are shaped."""

    factory: BackendFactory
    concurrency: int = 1  # requests one actor serves at once unless --llm-concurrency says
    is_async: bool = False  # offers agenerate: an async actor, many requests in one engine
    gpus: bool = False  # wants GPUs by default (tp of them per actor)


def _scripted(arg: str, options: dict[str, object]) -> LLM:
    return ScriptedLLM(arg)


def _llama(arg: str, options: dict[str, object]) -> LLM:
    from actors.llama_backend import LlamaLLM

    options.setdefault("model_path", arg or None)
    return LlamaLLM(**options)  # type: ignore[arg-type]


def _vllm(arg: str, options: dict[str, object]) -> AsyncLLM:
    from actors.vllm_backend import VllmLLM

    return VllmLLM(arg, **options)  # type: ignore[arg-type]


def _openai(arg: str, options: dict[str, object]) -> LLM:
    from actors.openai_backend import OpenAILLM

    base_url, model = split_openai(arg)
    return OpenAILLM(base_url, model, **options)  # type: ignore[arg-type]


BACKENDS: dict[str, Backend] = {
    "scripted": Backend(_scripted),
    "llama": Backend(_llama),
    # 32 sequences in flight per engine keeps a GPU's batches full without long queues.
    "vllm": Backend(_vllm, concurrency=32, is_async=True, gpus=True),
    # A server batches on its side; 8 open requests per actor is polite to hosted APIs.
    "openai": Backend(_openai, concurrency=8),
}
SPEC_HELP = ("llama, llama:/path/model.gguf, vllm:MODEL, openai:BASE_URL#MODEL, "
             "scripted:FILE.json, none")
# The spec of a search without any LLM: no actor, no model, no prompt; only the engine's own
# work (the baseline root, the floor's portfolio and trials, ensembles) runs.
NO_LLM = "none"


def split_openai(arg: str) -> tuple[str, str]:
    """`http://host:8000/v1#qwen` -> ("http://host:8000/v1", "qwen")."""
    base_url, _, model = arg.rpartition("#")
    if not base_url or not model:
        raise UserError(f"--llm openai:{arg} needs a model after '#': "
                        "openai:http://127.0.0.1:8000/v1#MODEL")
    if not re.match(r"^https?://[^/\s]+", base_url):
        raise UserError(f"--llm openai:{arg}: the base URL must start with http:// or https://")
    return base_url.rstrip("/"), model


def parse_spec(spec: str) -> tuple[str, str]:
    """`"llama"` -> ("llama", ""); `"scripted:replies.json"` -> ("scripted", "replies.json")."""
    kind, _, arg = spec.strip().partition(":")
    if kind == NO_LLM:
        if arg:
            raise UserError(f"--llm {spec.strip()!r}: none takes no argument; use --llm none")
        return kind, arg
    if kind not in BACKENDS:
        raise UserError(f"unknown LLM spec {spec!r}; use one of: {SPEC_HELP}")
    if kind in ("scripted", "vllm", "openai") and not arg:
        example = {"scripted": "scripted:replies.json", "vllm": "vllm:Qwen/Qwen2.5-Coder-7B",
                   "openai": "openai:http://127.0.0.1:8000/v1#MODEL"}[kind]
        raise UserError(f"--llm {kind} needs an argument: --llm {example}")
    if kind == "openai":
        split_openai(arg)
    return kind, arg


def located(spec: str, base: Path) -> str:
    """The spec with a relative file path (`scripted:`, `llama:`) made relative to `base`: an
    LLM actor reads it from its own working directory, which is not the driver's when the
    driver joined a Ray it did not start."""
    kind, _, arg = spec.partition(":")
    if kind not in ("scripted", "llama") or not arg:
        return spec
    path = Path(arg).expanduser()
    return f"{kind}:{path if path.is_absolute() else base / path}"


def backend_of(spec: str) -> Backend:
    return BACKENDS[parse_spec(spec)[0]]


def make_llm(spec: str, **options: object) -> LLM | AsyncLLM:
    kind, arg = parse_spec(spec)
    if kind == NO_LLM:
        raise UserError("--llm none makes no LLM; name a model, e.g. --llm llama")
    return BACKENDS[kind].factory(arg, dict(options))


# ---- routing by operator ------------------------------------------------------------------

# Operators whose prompts go to an LLM (baseline roots and ensembles are engine-written).
ROUTED = tuple(op for op in Operator if op not in (Operator.BASELINE, Operator.ENSEMBLE))
_ROUTE = re.compile(r"^\s*([a-z]+(?:\s*,\s*[a-z]+)*)\s*=(.*)$", re.DOTALL)


@dataclass(frozen=True)
class Routes:
    """Which spec serves which operator. `entries` keep the order given; the first entry
    without operators (else the first entry) serves every operator not named."""

    entries: tuple[tuple[tuple[Operator, ...], str], ...]

    @property
    def fallback(self) -> str:
        return next((spec for ops, spec in self.entries if not ops), self.entries[0][1])

    @property
    def specs(self) -> list[str]:
        """Distinct specs, in order: one actor pool each (none for `--llm none`)."""
        return list(dict.fromkeys(spec for _, spec in self.entries if spec != NO_LLM))

    @property
    def none(self) -> bool:
        """`--llm none`: no LLM serves any operator."""
        return not self.specs

    def spec_for(self, operator: Operator) -> str:
        for ops, spec in self.entries:
            if operator in ops:
                return spec
        return self.fallback

    def text(self) -> str:
        """The `--llm` form: `draft,improve=SPEC;debug=SPEC2` (one spec alone stays as is)."""
        return ";".join(
            f"{','.join(op.value for op in ops)}={spec}" if ops else spec
            for ops, spec in self.entries
        )

    def map_specs(self, fn: Callable[[str], str]) -> Routes:
        return Routes(tuple((ops, fn(spec)) for ops, spec in self.entries))


def parse_routes(text: str) -> Routes:
    """`"llama"` or `"draft,improve=vllm:big;debug=vllm:small"` -> Routes, validated.

    Entries are separated by `;`; `OPS=SPEC` names operators (comma-separated) before the
    first `=`, an entry without `OPS=` is the default for every operator not named.
    """
    entries: list[tuple[tuple[Operator, ...], str]] = []
    seen: dict[Operator, str] = {}
    defaults = 0
    names = ", ".join(op.value for op in ROUTED)
    for raw in text.split(";"):
        if not raw.strip():
            raise UserError(f"--llm {text!r} has an empty entry; separate specs with one ';'")
        match = _ROUTE.match(raw)
        ops: list[Operator] = []
        spec = raw.strip()
        if match:
            spec = match.group(2).strip()
            for name in (n.strip() for n in match.group(1).split(",")):
                if name not in {op.value for op in ROUTED}:
                    raise UserError(f"--llm: unknown operator {name!r} in {raw.strip()!r}; "
                                    f"route one of: {names}")
                op = Operator(name)
                if op in seen:
                    raise UserError(f"--llm: operator {name!r} is routed twice "
                                    f"({seen[op]!r} and {spec!r}); name it once")
                seen[op] = spec
                ops.append(op)
        else:
            defaults += 1
            if defaults > 1:
                raise UserError(f"--llm {text!r} has {defaults} entries without operators; "
                                "only one may be the default (e.g. 'debug=SPEC2;SPEC')")
        parse_spec(spec)
        entries.append((tuple(ops), spec))
    if len(entries) > 1 and any(parse_spec(spec)[0] == NO_LLM for _, spec in entries):
        raise UserError(f"--llm {text!r}: none means no LLM at all and cannot be routed "
                        "beside other specs; pass --llm none alone, or name a model for every "
                        "operator")
    return Routes(tuple(entries))


def routes_from_mapping(mapping: dict[object, object], source: str) -> str:
    """A task.yaml mapping `{draft: SPEC, "improve,debug": SPEC2, default: SPEC3}` -> text."""
    parts: list[str] = []
    for key, spec in mapping.items():
        if not isinstance(spec, str):
            raise UserError(f"{source}: llm.{key} must be a spec string like 'vllm:MODEL'")
        parts.append(spec if str(key).strip() == "default" else f"{key}={spec}")
    if not parts:
        raise UserError(f"{source}: llm is an empty mapping; give at least one spec")
    return ";".join(parts)
