"""Chat request and reply: the one currency between operators and every LLM backend."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    messages: list[dict[str, str]]  # OpenAI-style {"role", "content"}
    max_tokens: int = 1024
    temperature: float = 0.7
    seed: int = 0
    tag: str = ""  # the operator that built it: scripted replay and model routing key on it
    stop: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    model: str
    finish_reason: str = "stop"
