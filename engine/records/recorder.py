"""What the run directory keeps of each node a search start finishes (`NodeRecorder`), in
the order a resume relies on: its predictions before its row (a stored scored node always has
them), the row, the Journal, the fold models of the nodes that can still become the answer
(engine/deploy/saved_model.py: saving it then fits nothing again), its in-flight note cleared,
and best/ when it is the new best."""

from __future__ import annotations

from actors.pool import short_error
from common.errors import StoreError
from engine.deploy.saved_model import answer_candidates
from engine.evaluation.scoring import HeldOut, frame_csv
from engine.records.store import RunStore
from engine.task.prepare import PreparedTask
from search.journal import Journal
from search.node import Node


class NodeRecorder:
    """Stores the finished nodes of one start into `store` and `journal`; with
    `keep_fold_models` (the answer is saved at the end), the fold models scoring fitted."""

    def __init__(self, store: RunStore, task: PreparedTask, journal: Journal, *,
                 keep_fold_models: bool = False) -> None:
        self.store, self.task, self.journal = store, task, journal
        self.keep_fold_models = keep_fold_models

    def record(self, node: Node, test_raw: float | None, predictions: HeldOut | None,
               fold_models: list[bytes] | None, *, stopped: bool = False) -> None:
        """Store `node`; a node `stopped` (the deadline, Ctrl-C) keeps its in-flight note, so
        a resume proposes it again."""
        store, previous_best = self.store, self.journal.best()
        try:
            if predictions is not None:
                valid_csv = frame_csv(self.task, predictions.valid)
                test_csv = frame_csv(self.task, predictions.test)
                store.write_predictions(node.node_id, valid_csv, test_csv)
            store.append(node, test_raw)
        except OSError as exc:
            # A full or failing disk: stop now rather than run nodes that cannot be kept. Every
            # part written so far is whole (write, fsync, rename), and this node's in-flight
            # note stays, so a resume re-proposes it.
            raise StoreError(f"cannot store node {node.node_id} in {store.nodes_dir}: "
                             f"{short_error(exc)}; free disk space, then --resume "
                             f"{store.root}") from exc
        self.journal.add(node)
        if self.keep_fold_models and node.metric is not None:
            self._keep_fold_models(node, fold_models)
        if not stopped:
            store.clear_in_flight(node.node_id)
        if self.journal.best() is not previous_best and predictions is not None:
            store.write_best(node, valid_csv, test_csv)

    def _keep_fold_models(self, node: Node, fold_models: list[bytes] | None) -> None:
        """Keep a scored node's fold models while it can become the answer or a member of
        it, and drop those of nodes that no longer can. A disk that refuses them costs only
        the time to fit the answer again at the end."""
        keepers = answer_candidates(self.journal)
        try:
            if fold_models is not None and node.node_id in keepers:
                self.store.keep_fold_models(node.node_id, fold_models)
            self.store.drop_fold_models(keepers)
        except OSError:
            pass
