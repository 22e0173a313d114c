"""The two sides a search loop (engine/loop.py) schedules onto, as a run wires them: the LLM
side (`LlmSide`; at work, `LlmPools`) and the executors (`ExecutorSide`).

`LlmPools` owns the LLM's slots: one actor pool per model (actors/pool.py), the route from an
operator to the pool that serves it, the requests waiting for a slot of their model, and the
LLM's retirement once its feature programs stop paying (search.programs.programs_spent): from
then on it is asked nothing, and its CPUs go to executors.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actors.pool import ActorPool, Call
from common.errors import BackendError
from engine.step import Generate, Step
from search.node import Operator

# An LLM actor that dies (or hangs past its timeout) is replaced; this many replacements in a
# row without one good reply from that actor means the backend itself is broken: stop loudly
# instead of losing every node of the run.
MAX_LLM_RESTARTS = 3


@dataclass(frozen=True)
class LlmSide:
    """The LLM side of a search. `slots` lists (actor, name) once per concurrent request an
    actor accepts (none: `--llm none`, only the floor's work runs); `pools` maps an actor name
    to its pool (its spec) and `route` an operator to the pool that serves it (needed with
    several pools); `restart(dead, name)` replaces an actor that died or hung past `timeout`
    seconds. The LLM is retired after `patience` feature programs in a row not kept (0:
    never), and asked for none while programs took more than `program_share` of the
    executors' seconds; `lend()` stops its actors and gives their CPUs as executors."""

    slots: list[tuple[Any, str]] = field(default_factory=list)
    pools: dict[str, str] = field(default_factory=dict)
    route: Callable[[Operator], str] | None = None
    timeout: float = 600.0
    restart: Callable[[Any, str], Any] | None = None
    patience: int = 0
    program_share: float = 1.0
    lend: Callable[[], list[Any]] | None = None

    @classmethod
    def of(cls, arguments: dict[str, Any], **choices: Any) -> LlmSide:
        """From `actors.workers.Workers.loop_arguments()`, with the run's `choices`."""
        return cls(arguments["llm_slots"], arguments["llm_pools"],
                   restart=arguments["restart_llm"], lend=arguments["lend_llm"], **choices)


@dataclass(frozen=True)
class ExecutorSide:
    """The executors: their actors, and `restart(dead)` replacing one that died."""

    actors: list[Any]
    restart: Callable[[Any], Any] | None = None

    @classmethod
    def of(cls, arguments: dict[str, Any]) -> ExecutorSide:
        """From `actors.workers.Workers.loop_arguments()`."""
        return cls(arguments["executors"], arguments["restart_executor"])


class LlmPools:
    """The LLM's pools at work: a step's request goes to the pool its operator is routed to,
    or waits (`queued`) for a slot of that pool."""

    def __init__(self, side: LlmSide) -> None:
        self.side = side
        pool_of = {name: side.pools.get(name, "") for _, name in side.slots}
        self.pools: dict[str, ActorPool[Step]] = {
            pool: ActorPool([s for s in side.slots if pool_of[s[1]] == pool], kind="LLM",
                            restart=side.restart, max_restarts=MAX_LLM_RESTARTS,
                            hang_seconds=side.timeout)
            for pool in dict.fromkeys(pool_of.values())
        }
        route = side.route
        if route is None:
            if len(self.pools) > 1:
                raise ValueError("several LLM pools need a route: operator -> pool")
            only = next(iter(self.pools), "")
            route = lambda operator: only  # noqa: E731 (one pool serves every operator)
        self._route = route
        self.slots = len(side.slots)
        self.queued: dict[str, deque[tuple[Step, Generate]]] = {p: deque() for p in self.pools}

    def __bool__(self) -> bool:
        """Whether any LLM serves the search (none with `--llm none` or once retired)."""
        return bool(self.pools)

    def has_free(self) -> bool:
        return any(pool.has_free() for pool in self.pools.values())

    def n_queued(self) -> int:
        return sum(len(q) for q in self.queued.values())

    def futures(self) -> set[asyncio.Future[Any]]:
        return set().union(*(p.futures() for p in self.pools.values()))

    def calls(self) -> list[Call[Step]]:
        return [c for pool in self.pools.values() for c in pool.calls()]

    def next_deadline(self) -> float:
        """When the first call in flight counts as hung (no pool: never)."""
        return min((pool.next_deadline() for pool in self.pools.values()), default=math.inf)

    def owner(self, future: asyncio.Future[Any]) -> ActorPool[Step]:
        return next(p for p in self.pools.values() if p.owns(future))

    def ask(self, step: Step, need: Generate) -> None:
        """Hand the request to a free slot of its model's pool, or queue it for one."""
        pool = self._route(step.operator)
        if pool not in self.pools:
            raise BackendError(f"no LLM actors serve {step.operator.value!r} (pool {pool!r})")
        if self.pools[pool].has_free():
            self._generate(step, need, pool)
        else:
            self.queued[pool].append((step, need))

    def hand_queued(self) -> None:
        """Requests waiting for their model to the slots free now."""
        for pool, queued in self.queued.items():
            while queued and self.pools[pool].has_free():
                self._generate(*queued.popleft(), pool)

    def _generate(self, step: Step, need: Generate, pool: str) -> None:
        call = self.pools[pool].submit(step, "generate", [need.prompt])
        step.generating(call.slot)

    def retire(self) -> list[Any]:
        """Ask nothing more: the actors their CPUs made (`lend`), and the pools go."""
        lent = self.side.lend() if self.side.lend is not None else []
        self.pools, self.queued, self.slots = {}, {}, 0
        return lent

    def cancel_all(self) -> list[Step]:
        """The steps of every request in flight or queued, all dropped."""
        steps = [step for pool in self.pools.values() for step in pool.cancel_all()]
        steps += [step for q in self.queued.values() for step, _ in q]
        for queued in self.queued.values():
            queued.clear()
        return steps
