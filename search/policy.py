"""What a search policy is: it proposes expansions and observes results; it never executes.

The loop asks `propose(journal, n, in_flight)` whenever workers are free, where `in_flight`
counts proposals already handed out and not yet finished, keyed by `(operator, parent_id)`.
Policies use it to spread concurrent work (virtual loss), so N workers explore N things.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from search.errors import UserError
from search.journal import Journal
from search.node import Node, Operator

InFlightKey = tuple[Operator, str | None]


@dataclass(frozen=True, slots=True)
class Proposal:
    operator: Operator
    parent_id: str | None = None
    temperature: float = 0.7
    hint: str = ""

    @property
    def key(self) -> InFlightKey:
        return (self.operator, self.parent_id)


class Policy(Protocol):
    name: str

    def propose(
        self, journal: Journal, n: int, in_flight: Mapping[InFlightKey, int]
    ) -> list[Proposal]: ...

    def observe(self, node: Node) -> None: ...


PolicyFactory = Callable[..., Policy]
_REGISTRY: dict[str, PolicyFactory] = {}


def register(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    def wrap(factory: PolicyFactory) -> PolicyFactory:
        _REGISTRY[name] = factory
        return factory

    return wrap


def available() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def make_policy(name: str, seed: int, **options: object) -> Policy:
    _load_builtin()
    if name not in _REGISTRY:
        raise UserError(f"unknown policy {name!r}; choose one of: {', '.join(available())}")
    return _REGISTRY[name](seed=seed, **options)


def _load_builtin() -> None:
    # Importing registers them; deferred so search.policy has no import cycle.
    from search import greedy, mcts, sela  # noqa: F401
