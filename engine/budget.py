"""A run's budget: the wall clock, the node count and the token count, whichever ends first.

Pure: the loop asks it whether to propose and how long is left; the run object sets its
reserve, the seconds kept for the answer's work after the search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    """Wall clock, node count and token count: whichever runs out first ends the run.

    The wall clock is a hard stop (work in flight is killed and recorded); spent nodes or
    tokens only stop new proposals, and the work already paid for finishes.
    """

    seconds: float
    max_nodes: int | None = None
    max_tokens: int | None = None
    started: float = field(default_factory=time.monotonic)
    # Seconds kept at the end for the answer's work after the search (engine/evaluation/final.py
    # closing_seconds): the search's own clock stops that much before `seconds`.
    reserve: float = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        """The search's seconds left: the budget less what has passed and the reserve."""
        return self.seconds - self.reserve - self.elapsed()

    def room(self, done: int, in_flight: int, tokens: int) -> int:
        """How many more proposals may start now."""
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return 0
        if self.max_nodes is None:
            return 1 << 30
        return self.max_nodes - done - in_flight
