"""Chat request and reply: the one currency between operators and every LLM backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    messages: list[dict[str, str]]  # OpenAI-style {"role", "content"}
    max_tokens: int = 1024
    temperature: float = 0.7
    seed: int = 0
    tag: str = ""  # the operator that built it: scripted replay and model routing key on it
    # Strings that end the reply, matched in what the model writes after reply_start: a backend
    # that writes the whole reply itself (no reply_start) sends none when there is one, since
    # they may match inside the start it writes.
    stop: list[str] = field(default_factory=list)
    # A JSON schema the reply must follow; backends that can constrain decoding to it do
    # (llama.cpp: a grammar), the others ignore it and the caller parses leniently.
    json_schema: dict[str, Any] | None = None
    # The start of the reply, written for the model: it only continues it (the embedded model
    # then spends no tokens on a fence, a preamble or import lines). Backends that render the
    # chat template themselves (llama.cpp, vLLM) do, and their reply's text begins with it; an
    # OpenAI-compatible server gets the messages alone and writes the whole reply. llama.cpp
    # constrains no continued reply by json_schema.
    reply_start: str = ""
    # Column names the reply must never write (a feature program's target) and those it may:
    # a backend that can steer decoding (llama.cpp, on a continued reply) masks the tokens
    # that would spell a never-name inside `df["...`; the others ignore both, and the
    # engine's checks refuse what gets through either way.
    never_names: tuple[str, ...] = ()
    column_names: tuple[str, ...] = ()
    # Computations already tried (values as `operators.features.computations` writes them):
    # the same backends mask the second column of a computation of two columns that would make
    # one of them again, and a column read that is not among column_names
    # (actors.name_guard.ReadGuard); the checks refuse what gets through.
    never_computations: tuple[str, ...] = ()
    # Of column_names, those that hold text, which the same backends keep out of arithmetic
    # (ReadGuard), and those the feature set's kept programs add, which a statement may not
    # assign again (WriteGuard); the checks refuse or drop what gets through.
    text_names: tuple[str, ...] = ()
    kept_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    model: str
    finish_reason: str = "stop"
