"""Ray actors: one LLM actor per model replica, one executor actor per sandbox slot.

Actors own their mutable state (a loaded model, a sandbox); the driver owns the Journal. Task
inputs arrive as one object-store reference, so remote executors need no shared disk.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

import ray

from sandbox import ExecResult, Limits, run_script
from search.chat import ChatPrompt, Reply


@dataclass(frozen=True, slots=True)
class ExecOutcome:
    result: ExecResult
    executor: str
    node_ip: str


class _LLMWorker:
    def __init__(self, spec: str, name: str, options: dict[str, Any]) -> None:
        from actors.llm import make_llm

        self.name = name
        self.llm = make_llm(spec, **options)

    def model(self) -> str:
        return self.llm.model

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        return self.llm.generate(prompts)


class _ExecutorWorker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.node_ip = _node_ip()

    def run(self, code: str, inputs: dict[str, bytes], limits: Limits) -> ExecOutcome:
        return ExecOutcome(run_script(code, inputs, limits), self.name, self.node_ip)

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this executor lives on (fault tests remove that node)."""
        return str(ray.get_runtime_context().get_node_id())


# Wrapped rather than decorated so type checkers see the plain classes and Ray sees actors.
LLMActor: Any = ray.remote(_LLMWorker)
ExecutorActor: Any = ray.remote(_ExecutorWorker)


def _node_ip() -> str:
    try:
        return ray.util.get_node_ip_address()
    except Exception:
        return socket.gethostname()


def start_llm_actors(spec: str, replicas: int, options: dict[str, Any], *,
                     concurrency: int = 1, num_cpus: float = 1.0,
                     resources: dict[str, float] | None = None) -> list[Any]:
    """LLM actors placed by Ray resources: CPUs here, or a custom `llm` slot on a cluster."""
    return [
        LLMActor.options(num_cpus=num_cpus, resources=resources or {},
                         max_concurrency=concurrency).remote(spec, f"llm-{i}", options)
        for i in range(replicas)
    ]


def start_executors(count: int, *, num_cpus: float = 1.0,
                    resources: dict[str, float] | None = None) -> list[Any]:
    """One sandbox slot per actor, placed wherever Ray finds the resources."""
    return [
        ExecutorActor.options(num_cpus=num_cpus, resources=resources or {},
                              max_concurrency=1).remote(f"exec-{i}")
        for i in range(count)
    ]
