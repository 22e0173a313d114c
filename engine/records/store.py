"""The run directory: manifest, hidden task splits, and one Parquet part per finished node.

Parts are append-only small files, each written to a temporary name, fsynced and renamed, so
a crash mid-write never leaves a torn part and resume reads exactly the nodes that finished.
This is the only module that writes Parquet.

Every scored node's submission is kept too, gzipped under `preds/<node_id>/`: the final
selection compares nodes row by row on valid, and writes `best/` from them without a re-run.
The fold models an engine-written node's scoring run fitted are kept under
`models/<node_id>/` while the node can still become the answer or one of its members, so the
answer's saved model needs no fitting (engine/deploy/saved_model.py).
"""

from __future__ import annotations

import gzip
import json
import math
import secrets
import shutil
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from common.errors import StoreError
from engine.evaluation.folds import Folds
from engine.task.prepare import PreparedTask, load_task, save_task
from fileio import replacing, replacing_dir, write_atomic
from search.node import LONG_TEXT_FIELDS, Node, Operator
from search.policy import Proposal

_ARROW = {"str": pa.string(), "str | None": pa.string(), "Operator": pa.string(),
          "Status": pa.string(), "int": pa.int64(), "int | None": pa.int64(),
          "float": pa.float64(), "float | None": pa.float64()}


def _schema() -> pa.Schema:
    """One column per Node field, in its order, plus the test score kept beside the node (after
    `metric_raw`). Columns added later read back as null from parts written before them."""
    columns = []
    for f in fields(Node):
        if f.type not in _ARROW:
            raise TypeError(f"Node.{f.name}: no Parquet type for {f.type!r}; add it to _ARROW")
        columns.append((f.name, _ARROW[str(f.type)]))
        if f.name == "metric_raw":
            columns.append(("test_metric_raw", pa.float64()))
    return pa.schema(columns)


SCHEMA = _schema()
# Long text columns get no min/max statistics: Parquet would store each value twice more in the
# footer, useless for text. Measured on 500 improve rows with ~3.8k-character prompts: a
# one-node part 41 KB -> 11 KB, a 500-node chunk 408 KB -> 135 KB (with zstd).
WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "write_statistics": [f.name for f in SCHEMA if f.name not in LONG_TEXT_FIELDS],
}

FOLDS_JSON = "folds.json"  # in task/: hidden from every sandbox, like the labels
MODELS_DIR = "models"  # the fold models scoring kept, one folder per node
COMPACT_EVERY = 500  # parts merged into a chunk this often, and at the end of every start


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class RunStore:
    """Owns `runs/<run_id>/`. Construct with `create` (new run) or `open` (resume, read)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._appended = 0
        self.nodes_dir = root / "nodes"
        self.task_dir = root / "task"
        self.manifest_path = root / "manifest.json"

    @property
    def run_id(self) -> str:
        return self.root.name

    @classmethod
    def create(cls, out: Path, task: PreparedTask, manifest: dict[str, Any],
               folds: Folds | None = None) -> RunStore:
        """Write task, folds and manifest into a hidden folder, then rename it into place, so
        a failure here leaves no half-made run behind."""
        run_id = new_run_id()
        out.mkdir(parents=True, exist_ok=True)
        staging = out / f".{run_id}.partial"
        try:
            staging.mkdir()
            (staging / "nodes").mkdir()
            (staging / "inflight").mkdir()
            save_task(task, staging / "task")
            if folds is not None:
                (staging / "task" / FOLDS_JSON).write_text(folds.dumps())
            manifest = {**manifest, "run_id": run_id, "data_hash": task.data_hash}
            _write_json(staging / "manifest.json", manifest)
            staging.rename(out / run_id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return cls(out / run_id)

    @classmethod
    def open(cls, root: Path) -> RunStore:
        store = cls(root)
        if not store.manifest_path.is_file() or not store.task_dir.is_dir():
            raise StoreError(
                f"{root} is not a run directory (no manifest.json/task/); "
                "pass --resume runs/<run_id>"
            )
        return store

    def load_task(self) -> PreparedTask:
        task = load_task(self.task_dir)
        expected = self.manifest().get("data_hash")
        if expected and expected != task.data_hash:
            raise StoreError(
                f"{self.task_dir} no longer matches the manifest's data hash; "
                "the task data changed: start a new run instead of resuming"
            )
        return task

    def load_folds(self) -> Folds | None:
        """The run's folds; None for a run stored before folds (scored on the holdout)."""
        path = self.task_dir / FOLDS_JSON
        if not path.is_file():
            return None
        try:
            return Folds.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc

    def manifest(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.manifest_path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise StoreError(f"cannot read {self.manifest_path}: {exc}") from exc

    def update_manifest(self, **values: Any) -> dict[str, Any]:
        manifest = {**self.manifest(), **values}
        _write_json(self.manifest_path, manifest)
        return manifest

    def append(self, node: Node, test_metric_raw: float | None) -> Path:
        """Persist one finished node as its own Parquet part."""
        row = node.to_record()
        row["test_metric_raw"] = test_metric_raw
        table = pa.Table.from_pylist([row], schema=SCHEMA)
        final = self.nodes_dir / f"part-{node.step:06d}-{node.node_id}.parquet"
        with replacing(final) as tmp:
            pq.write_table(table, tmp, **WRITE_OPTIONS)
        self._appended += 1
        if self._appended % COMPACT_EVERY == 0:
            self.compact()
        return final

    def compact(self) -> Path | None:
        """Merge single-node parts into one chunk file, so reopening a long run reads a few
        files instead of thousands (Parquet's per-file cost dominates a 10k-node rebuild).

        The chunk is renamed into place before the parts are deleted; a crash in between
        leaves rows twice, which `read_rows` drops by node id.
        """
        parts = sorted(self.nodes_dir.glob("part-*.parquet"))
        if len(parts) < 2:
            return None
        table = pq.read_table(parts[0], schema=SCHEMA)
        table = pa.concat_tables([table, *(pq.read_table(p, schema=SCHEMA) for p in parts[1:])])
        steps = table.column("step").to_pylist()
        final = self.nodes_dir / f"chunk-{min(steps):06d}-{max(steps):06d}.parquet"
        with replacing(final) as tmp:
            pq.write_table(table, tmp, **WRITE_OPTIONS)
        for part in parts:
            part.unlink()
        return final

    def mark_in_flight(self, node_id: str, proposal: Proposal) -> None:
        """Note a proposal before its work starts; a driver killed now leaves this behind."""
        _write_json(self.root / "inflight" / f"{node_id}.json", {
            "operator": proposal.operator.value, "parent_id": proposal.parent_id,
            "temperature": proposal.temperature, "hint": proposal.hint,
        })

    def clear_in_flight(self, node_id: str) -> None:
        (self.root / "inflight" / f"{node_id}.json").unlink(missing_ok=True)

    def take_in_flight(self) -> list[Proposal]:
        """Proposals left in flight by the previous start, oldest first; clears them."""
        folder = self.root / "inflight"
        entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        proposals = []
        for path in entries:
            data = json.loads(path.read_text())
            proposals.append(Proposal.from_hint(Operator(data["operator"]), data["parent_id"],
                                                data["temperature"], data["hint"]))
            path.unlink()
        return proposals

    def write_predictions(self, node_id: str, valid_csv: bytes, test_csv: bytes) -> None:
        """Keep a scored node's held-out (out-of-fold) and test predictions (written, then
        renamed)."""
        with replacing_dir(self.root / "preds" / node_id) as staging:
            for split, data in (("valid", valid_csv), ("test", test_csv)):
                # The fastest level: the loop waits for it. gzip's default (9) took 11.5 s on
                # the 5 MB of a 2.56 M-row test split's labels, level 1 0.03 s for twice
                # the bytes (benchmarks/results/big-data-2026-12-07b).
                (staging / f"{split}.csv.gz").write_bytes(
                    gzip.compress(data, compresslevel=1, mtime=0))

    def read_predictions(self, node_id: str, split: str) -> bytes | None:
        """A node's kept submission for `split`; None for a node stored without one (failed,
        or from a run that predates kept predictions)."""
        path = self.root / "preds" / node_id / f"{split}.csv.gz"
        try:
            return gzip.decompress(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, EOFError) as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc

    def keep_fold_models(self, node_id: str, states: list[bytes]) -> None:
        """Keep the fold models a node's scoring run fitted (models/<node_id>/fold-<i>.pkl,
        written whole), while it can still become the answer or a member of it."""
        with replacing_dir(self.root / MODELS_DIR / node_id) as staging:
            for fold, state in enumerate(states):
                (staging / f"fold-{fold}.pkl").write_bytes(state)

    def kept_fold_models(self) -> dict[str, list[int]]:
        """The nodes whose fold models are kept, each with the bytes of its models in fold
        order."""
        folder = self.root / MODELS_DIR
        if not folder.is_dir():
            return {}
        return {p.name: [f.stat().st_size for f in _fold_files(p)]
                for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")}

    def read_fold_models(self, node_id: str) -> list[bytes] | None:
        """A node's kept fold models, in fold order; None when none are kept."""
        return [p.read_bytes() for p in _fold_files(self.root / MODELS_DIR / node_id)] or None

    def drop_fold_models(self, keep: set[str]) -> None:
        """Remove the kept fold models of every node not in `keep` (none can become the
        answer any more; at the end of a start, every node's: best/model/ holds the answer's)."""
        for node_id in self.kept_fold_models().keys() - keep:
            shutil.rmtree(self.root / MODELS_DIR / node_id, ignore_errors=True)

    def write_best(self, node: Node, valid_csv: bytes | None, test_csv: bytes | None) -> None:
        """Keep the current best solution runnable on its own: code plus its predictions."""
        with replacing_dir(self.root / "best") as staging:
            (staging / "submission").mkdir()
            (staging / "solution.py").write_text(node.code)
            for name, data in (("valid.csv", valid_csv), ("test.csv", test_csv)):
                if data is not None:
                    (staging / "submission" / name).write_bytes(data)
            _write_json(staging / "node.json", {
                "node_id": node.node_id, "operator": node.operator.value, "step": node.step,
                "metric_raw": node.metric_raw, "plan": node.plan,
            })

    def read_best(self, split: str) -> bytes | None:
        """The answer's submission for `split`, as `write_best` kept it; None when absent."""
        path = self.root / "best" / "submission" / f"{split}.csv"
        return path.read_bytes() if path.is_file() else None

    def read_rows(self) -> list[dict[str, Any]]:
        """Every stored node as a dict, in step order (NaN read back as None)."""
        files = sorted(self.nodes_dir.glob("chunk-*.parquet"))
        files += sorted(self.nodes_dir.glob("part-*.parquet"))
        if not files:
            return []
        try:
            table = ds.dataset([str(p) for p in files], schema=SCHEMA, format="parquet").to_table()
        except (OSError, pa.ArrowInvalid) as exc:
            raise StoreError(f"cannot read node parts in {self.nodes_dir}: {exc}") from exc
        rows: dict[str, dict[str, Any]] = {}
        for row in table.combine_chunks().to_pylist():
            clean = {k: None if isinstance(v, float) and math.isnan(v) else v
                     for k, v in row.items()}
            rows.setdefault(str(clean["node_id"]), clean)
        return sorted(rows.values(), key=lambda r: (r["step"], r["node_id"]))

    def read_nodes(self) -> tuple[list[Node], dict[str, float | None]]:
        """Nodes for the Journal, and the test scores kept apart from them."""
        rows = self.read_rows()
        tests = {r["node_id"]: r.pop("test_metric_raw") for r in rows}
        return [Node.from_record(r) for r in rows], tests


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def _fold_files(folder: Path) -> list[Path]:
    """A node's kept fold models (models/<node_id>/fold-<i>.pkl), in fold order."""
    return sorted(folder.glob("fold-*.pkl"), key=lambda p: int(p.stem.split("-")[1]))
