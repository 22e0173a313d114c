"""What the operators know about a task: built once per run by the engine, shared by the
prompts, the harness and the analyst."""

from __future__ import annotations

from dataclasses import dataclass

from operators.retrieval import Case, Fix


@dataclass(frozen=True, slots=True)
class ColumnLevels:
    """A text column's values in the training rows: what the question on its kind shows and
    what the engine checks the answer against (operators/column_kinds.py)."""

    column: str
    # its most frequent levels with their counts, most frequent first (at most
    # column_kinds.MAX_LEVELS: every level of a column that has no more)
    counts: tuple[tuple[str, int], ...]
    distinct: int  # how many levels the training rows hold

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(level for level, _ in self.counts)

    @property
    def complete(self) -> bool:
        """Every level of the column is in `counts`."""
        return self.distinct == len(self.counts)


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What the operators know about a task; built once per run by the engine."""

    preview: str
    target: str
    task_type: str
    metric: str
    maximize: bool
    labels: tuple[str, ...] = ()
    needs_proba: bool = False
    seed: int = 0
    max_tokens: int = 900  # a fit_predict fits in ~400 tokens; the cap bounds rambling replies
    findings: str = ""  # --analyst: facts the exploration script printed (see analysis_findings)
    # --memory (engine/memory.py): other tasks' working code retrieved for this one (a recall
    # step adapts one), and the fixes a debug step may be shown
    cases: tuple[Case, ...] = ()
    fixes: tuple[Fix, ...] = ()
    fingerprint: str = ""  # of this task (operators.retrieval.task_fingerprint)
    columns: tuple[str, ...] = ()  # the feature columns: what a feature program may name
    text_columns: tuple[str, ...] = ()  # those pandas does not read as numbers
    # The task and its columns without the files and libraries a whole script needs: what a
    # feature program's prompt shows ("" : the preview)
    feature_preview: str = ""
    # Each text column's levels in the training rows (the column kinds' questions)
    text_levels: tuple[ColumnLevels, ...] = ()
