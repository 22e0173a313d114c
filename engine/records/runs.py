"""Reading a run directory: `open_run(root)` is the one reader that resume, outputs, show,
predict, export and the benchmarks use.

A run reads the same however it is opened: its rows in step order, the test scores kept apart
from the nodes, the Journal built with the run's constraints (so eligibility follows from the
measurements) and with the final selection the manifest records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import UserError
from engine.evaluation.scoring import HeldOut, SubmissionError, read_submission, submission_metric
from engine.evaluation.selection import Selection
from engine.records.store import RunStore
from engine.task.prepare import PreparedTask
from search.constraints import Constraints
from search.journal import Journal
from search.node import Node


@dataclass(frozen=True)
class StoredRun:
    """A run read once from its store: the rows (with test scores), the Journal, the manifest."""

    store: RunStore
    rows: list[dict[str, Any]]
    journal: Journal
    tests: dict[str, float | None]
    manifest: dict[str, Any]

    @property
    def root(self) -> Path:
        return self.store.root

    @property
    def selection(self) -> Selection | None:
        """Why the run chose its answer, as the manifest records it (None before a choice)."""
        return Selection.read(self.manifest)

    @property
    def config(self) -> dict[str, Any]:
        """The run's configuration as stored (engine.config.RunConfig.from_json reads it)."""
        return dict(self.manifest.get("config", {}))

    def task(self) -> PreparedTask:
        """The run's splits, checked against the manifest's data hash."""
        return self.store.load_task()


def open_run(root: Path) -> StoredRun:
    """Read the run at `root`; a folder that is not one is the user's input to fix."""
    root = Path(root)
    if not (root / "manifest.json").is_file() or not (root / "task").is_dir():
        raise UserError(f"{root} is not a run directory (no manifest.json and task/); "
                        "pass runs/<run_id>")
    store = RunStore.open(root)
    manifest = store.manifest()  # StoreError when damaged: each caller says what it was doing
    rows = store.read_rows()
    tests = {str(r["node_id"]): r.get("test_metric_raw") for r in rows}
    journal = Journal([Node.from_record(r) for r in rows],
                      constraints=Constraints.from_mapping(manifest.get("config", {})))
    apply_selection(journal, manifest)
    return StoredRun(store, rows, journal, tests, manifest)


def kept_predictions(store: RunStore, task: PreparedTask, nodes: Iterable[Node],
                     held_out: int) -> Iterator[tuple[Node, HeldOut]]:
    """What the scored nodes of a stored run predicted (held-out rows, test rows), as the
    step scored them; a node kept before folds, or without predictions, is left out."""
    for node in nodes:
        if node.metric is None:
            continue
        try:
            valid = read_submission(task, store.read_predictions(node.node_id, "valid"),
                                    "valid", held_out)
            test = read_submission(task, store.read_predictions(node.node_id, "test"), "test")
        except SubmissionError:
            continue
        yield node, HeldOut(valid, test, node.metric_raw or 0.0,
                            submission_metric(task, test, task.test_y))


def apply_selection(journal: Journal, manifest: dict[str, Any]) -> None:
    """Make the journal's `final` the answer a run's manifest records, if it still qualifies."""
    selection = Selection.read(manifest)
    winner = selection.node_id if selection is not None else None
    if isinstance(winner, str) and winner in journal and journal.is_eligible(journal.get(winner)):
        journal.choose(winner)
