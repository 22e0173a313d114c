"""A search's progress as the user sees it: the live status line (nodes, what is in flight,
the best score, the search's time left and the answer's reserve), or plain log lines with
--quiet. Reads the journal, the budget and the loop's counts; changes nothing."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from engine.budget import Budget
from engine.task.prepare import PreparedTask
from search.journal import Journal
from search.node import Node


class Progress:
    """The live status line (or plain log lines with --quiet)."""

    def __init__(self, console: Console, task: PreparedTask, journal: Journal,
                 budget: Budget) -> None:
        self.console = console
        self.task = task
        self.journal = journal
        self.budget = budget
        self.tokens = 0
        self.loop: Any = None  # the SearchLoop, once it exists, for in-flight counts
        self.per_worker: dict[str, int] = {}  # nodes finished per LLM actor and executor
        self.retirement_told = False

    def node(self, node: Node, tokens: int) -> None:
        self.tokens = tokens
        for worker in (node.llm_actor, node.executor):
            if worker:
                self.per_worker[worker] = self.per_worker.get(worker, 0) + 1
        name = self.task.metric.name
        metric = "" if node.metric_raw is None else f" {name}={node.metric_raw:.5g}"
        error = f"  {node.error[:100]}" if node.error else ""
        self.console.print(
            f"[{self.budget.elapsed():6.0f}s] {node.operator.value:<8} "
            f"{node.node_id} {node.status.value}{metric}{error}",
            markup=False, highlight=False,
        )

    def llm_retired(self, at: float, why: str) -> None:
        """Say once, as it happens, that the LLM was asked for no more (--llm-patience)."""
        if self.retirement_told:
            return
        self.retirement_told = True
        self.console.print(
            f"[{at:6.0f}s] the LLM is asked for no more ({why}); its CPUs run the floor's "
            "trials from now on",
            markup=False, highlight=False,
        )

    def __rich__(self) -> Text:
        left = max(0.0, self.budget.left())
        elapsed = max(1e-9, self.budget.elapsed())
        best = self.journal.best()
        counts = self.journal.status_counts()
        shown = " ".join(f"{k} {v}" for k, v in counts.items() if v)
        best_text = "-" if best is None or best.metric_raw is None else f"{best.metric_raw:.5g}"
        busy = self.loop.snapshot() if self.loop is not None else {}
        flight = ", ".join(f"{v} {k}" for k, v in busy.items() if v) or "idle"
        workers = " ".join(f"{k}:{v}" for k, v in sorted(self.per_worker.items()))
        return Text(
            f"nodes {len(self.journal)} ({shown or 'none yet'}) | in flight: {flight} | "
            f"done per worker {workers or '-'} | "
            f"best valid {self.task.metric.name} {best_text} | "
            f"{self.tokens / elapsed:.1f} tok/s | search left {left:.0f}s "
            f"(+{self.budget.reserve:.0f}s kept for the answer)",
            style="bold",
        )
