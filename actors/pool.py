"""A pool of slots over Ray actors, modelled on Ray's `util/actor_pool.py`.

`submit` hands a remote method call to a free slot, the caller awaits `futures()` and gives
each finished one back to `finish`, which frees its slot; `expire` gives back calls past their
hang deadline (their actor killed, since a synchronous actor cannot cancel a running call);
`replace` starts a new actor for a slot whose actor died. The pool knows nothing of the work:
an item rides with each call and comes back with it.

A slot is a name. The actor that currently holds the name serves it, so a replacement takes
over every slot of the dead actor, including calls queued for it. An actor serving several
requests at once (an LLM actor with `max_concurrency` > 1) holds several slots of one name.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import ray

from common.errors import BackendError

Item = TypeVar("Item")


@dataclass(frozen=True, slots=True)
class Call(Generic[Item]):
    """One call in flight: the work item, the slot it holds, the actor serving it."""

    item: Item
    slot: str
    actor: Any
    deadline: float  # time.monotonic() after which it counts as hung


class ActorPool(Generic[Item]):
    """Slots `(actor, name)`; `restart(dead, name)` makes a replacement. `max_restarts`
    replacements of one name in a row without a `healthy` call in between mean the actors
    themselves are broken: `replace` then raises `BackendError`."""

    def __init__(self, slots: list[tuple[Any, str]], *, kind: str,
                 restart: Callable[[Any, str], Any] | None = None,
                 max_restarts: int | None = None, hang_seconds: float = math.inf) -> None:
        self.kind = kind
        self._actors: dict[str, Any] = {name: actor for actor, name in slots}
        self._free: deque[str] = deque(name for _, name in slots)
        self._size = len(slots)
        self._calls: dict[asyncio.Future[Any], Call[Item]] = {}
        self._restart = restart
        self._max_restarts = max_restarts
        self._restarts: dict[str, int] = {}
        self._hang_seconds = hang_seconds

    @property
    def size(self) -> int:
        return self._size

    def has_free(self) -> bool:
        return bool(self._free)

    def add(self, actor: Any, name: str) -> None:
        """One more slot, served by `actor` (an executor on CPUs an LLM gave back)."""
        self._actors[name] = actor
        self._free.append(name)
        self._size += 1

    def submit(self, item: Item, method: str, *args: Any) -> Call[Item]:
        """Call the remote `method(*args)` of a free slot's actor."""
        slot = self._free.popleft()
        actor = self._actors[slot]
        future = asyncio.ensure_future(_await(getattr(actor, method).remote(*args)))
        call = Call(item, slot, actor, time.monotonic() + self._hang_seconds)
        self._calls[future] = call
        return call

    def futures(self) -> set[asyncio.Future[Any]]:
        return set(self._calls)

    def owns(self, future: asyncio.Future[Any]) -> bool:
        return future in self._calls

    def calls(self) -> list[Call[Item]]:
        """The calls in flight, oldest first."""
        return list(self._calls.values())

    def finish(self, future: asyncio.Future[Any]) -> Call[Item]:
        """A finished call: its slot is free again."""
        call = self._calls.pop(future)
        self._free.append(call.slot)
        return call

    def healthy(self, slot: str) -> None:
        """The slot's actor answered: its run of replacements is over."""
        self._restarts.pop(slot, None)

    def next_deadline(self) -> float:
        """Seconds until the oldest call counts as hung (inf when none can)."""
        deadlines = [call.deadline for call in self._calls.values()]
        return min(deadlines) - time.monotonic() if deadlines else math.inf

    def expire(self, skip: set[asyncio.Future[Any]]) -> list[Call[Item]]:
        """Calls past their deadline (not in `skip`: those finished meanwhile), cancelled and
        their slots freed; an actor still serving its slot is killed."""
        now = time.monotonic()
        hung = []
        for future, call in list(self._calls.items()):
            if future in skip or call.deadline > now:
                continue
            future.cancel()
            self.finish(future)
            current = self._actors.get(call.slot)
            if current is not None and current is call.actor:
                ray.kill(current, no_restart=True)
            hung.append(call)
        return hung

    def replace(self, call: Call[Item]) -> None:
        """Start a new actor for the call's slot unless that was done already (several calls
        of one actor fail together); raise once its actors keep dying."""
        if self._restart is None or self._actors.get(call.slot) is not call.actor:
            return
        count = self._restarts.get(call.slot, 0) + 1
        if self._max_restarts is not None and count > self._max_restarts:
            raise BackendError(
                f"{self.kind} actor {call.slot} died or hung {count} times in a row; the "
                "backend is broken (check the model, memory, or --llm); finished nodes are "
                "stored, --resume later"
            )
        self._restarts[call.slot] = count
        self._actors[call.slot] = self._restart(call.actor, call.slot)

    def cancel_all(self) -> list[Item]:
        """Every item in flight, its call cancelled."""
        items = []
        for future in list(self._calls):
            future.cancel()
            items.append(self.finish(future).item)
        return items


async def _await(ref: Any) -> Any:
    return await ref


def short_error(exc: BaseException) -> str:
    """An exception in one line of at most about 300 characters, for a node's error."""
    # A RayTaskError's text is the remote traceback, whose first 300 characters never reach
    # the cause: name the exception the remote code raised instead.
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        exc = cause
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"
