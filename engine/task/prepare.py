"""Task preparation: read the user's CSV, check it, split it, and describe it.

`prepare_task` turns a `TaskSpec` (a CSV, a target column, optionally a test CSV and a metric)
into a `PreparedTask`: the task type, the metric, fixed train/valid/test splits, the hidden
valid/test labels, the `description.md` a candidate reads and a short `preview` for prompts.
Every bad input is a `UserError` with one line that says what is wrong and how to fix it, and
nothing is written before all checks pass.

The split files are kept as the exact bytes a candidate sees (`split_files`), and the frames are
parsed back from those bytes, so a task prepared now and the same task loaded from
`runs/<id>/task/` are identical, and `data_hash` is a hash of what was actually shown.

Reading and checking the CSVs lives in engine/task/checks.py, the description and preview in
engine/task/text.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from common.errors import StoreError, UserError
from common.metric import METRICS, MetricSpec, label_str, label_strs, positive_label
from engine.task.checks import (
    MIN_ROWS,
    check_target_column,
    drop_missing_target,
    integer_labels,
    one_line,
    read_csv,
    read_test_frame,
    resolve_metric,
    stated_task_type,
)
from engine.task.text import (
    column_facts,
    default_statement,
    render_description,
    render_feature_preview,
    render_preview,
)
from fileio import write_atomic

TEST_SHARE = 0.2
VALID_SHARE = 0.2
# VALID_SHARE of the whole is this share of what is left once test is set apart (0.25); a given
# test file leaves the data to split the same 60:20 way.
_VALID_OF_REST = VALID_SHARE / (1 - TEST_SHARE)

# The files hashed into data_hash, in the order they are hashed. Labels stay in the run's task/
# folder; only the first three go into a candidate's input/.
SPLIT_FILES = ("train.csv", "valid.csv", "test.csv", "valid_labels.csv", "test_labels.csv")
INPUT_FILES = ("train.csv", "valid.csv", "test.csv", "description.md")
# The layout of runs/<id>/task/task.json that save_task writes and load_task reads.
TASK_FORMAT = 1

_INTEGER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What the user asked for: the data, the column to predict and, optionally, how to score."""

    data: Path
    target: str
    test: Path | None = None
    metric: str | None = None  # None: DEFAULT_METRIC of the inferred task type
    text: str = ""  # free-text task statement for description.md
    task_type: str | None = None  # "classification" | "regression" as stated; None: inferred


# eq=False: the fields hold DataFrames, whose == is element-wise; compare tasks by data_hash.
@dataclass(frozen=True, eq=False)
class PreparedTask:
    """A task ready to search: splits, hidden labels and what a candidate is told."""

    target: str
    task_type: str  # "binary" | "multiclass" | "regression"
    metric: MetricSpec
    labels: tuple[str, ...]  # sorted class labels as strings; () for regression
    train: pd.DataFrame  # features + target
    valid_X: pd.DataFrame  # features only, in input/valid.csv order
    test_X: pd.DataFrame
    valid_y: pd.Series  # hidden labels: the driver scores with them, no candidate sees them
    test_y: pd.Series
    description: str  # description.md
    data_hash: str  # sha256 over split_files
    seed: int
    split_files: Mapping[str, bytes]  # SPLIT_FILES -> the exact bytes written and hashed
    text: str = ""  # the task statement (the user's, or a generated sentence)

    def inputs(self) -> dict[str, bytes]:
        """The files of a candidate's input/ folder, byte for byte: no labels of valid or test."""
        files = {name: self.split_files[name] for name in INPUT_FILES[:3]}
        files["description.md"] = self.description.encode("utf-8")
        return files

    def preview(self) -> str:
        """The facts of `description` in <= 40 short lines; byte-identical on every call."""
        return self._preview

    def feature_preview(self) -> str:
        """The task and its columns alone, for a feature program's prompt; byte-identical."""
        return self._feature_preview

    @property
    def text_columns(self) -> tuple[str, ...]:
        """The feature columns that hold text (anything pandas does not read as numbers)."""
        features = self.train.drop(columns=[self.target])
        return tuple(str(c) for c in features.select_dtypes(exclude="number").columns)

    @property
    def has_text_features(self) -> bool:
        return bool(self.text_columns)

    @property
    def positive_label(self) -> str | None:
        return positive_label(self.labels) if self.task_type == "binary" else None

    @cached_property
    def _preview(self) -> str:
        # Computed once per task: column statistics of a large train frame are not free, and the
        # preview is asked for on every prompt.
        return render_preview(self, self._facts)

    @cached_property
    def _feature_preview(self) -> str:
        return render_feature_preview(self, self._facts)

    @cached_property
    def _facts(self) -> list[Any]:
        return column_facts(self.train, self.target)

    def knowing(self, facts: list[Any]) -> PreparedTask:
        """This task, its column facts known already (a large table's took 10 s to compute,
        and preparing it had them for the description)."""
        self.__dict__["_facts"] = facts  # as cached_property stores them
        return self


def prepare_task(spec: TaskSpec, seed: int = 0) -> PreparedTask:
    """Read, check, type, split and describe the data of `spec`; raise UserError on bad input."""
    data_path = Path(spec.data).expanduser()
    frame = read_csv(data_path, "data file")
    target = spec.target
    check_target_column(frame, target, data_path)
    if len(frame.columns) < 2:
        raise UserError(
            f"data file {data_path} has only the target column `{target}`; "
            "it needs at least one feature column to predict from"
        )
    frame, dropped = drop_missing_target(frame, target, data_path)
    if len(frame) < MIN_ROWS:
        raise UserError(
            f"data file {data_path} has {len(frame)} rows with a value in `{target}`; "
            f"at least {MIN_ROWS} are needed to split it into train, valid and test"
        )
    task_type = stated_task_type(spec.task_type, frame[target], target)
    metric = resolve_metric(spec.metric, task_type)
    if task_type != "regression":
        frame[target] = integer_labels(frame[target])
        labels = sorted_labels(label_str(v) for v in frame[target].unique())
    else:
        labels = ()

    if spec.test is not None:
        test_path = Path(spec.test).expanduser()
        test_frame, test_dropped = read_test_frame(test_path, frame, target, labels, task_type)
        dropped += test_dropped
        strata = _strata(frame[target], task_type)
        train_idx, valid_idx = _split(np.arange(len(frame)), strata, _VALID_OF_REST, seed)
        train_part = frame.iloc[train_idx]
        valid_part = frame.iloc[valid_idx]
        test_part = test_frame
    else:
        strata = _strata(frame[target], task_type)
        rest_idx, test_idx = _split(np.arange(len(frame)), strata, TEST_SHARE, seed)
        train_idx, valid_idx = _split(rest_idx, strata, _VALID_OF_REST, seed)
        train_part, valid_part, test_part = (
            frame.iloc[train_idx], frame.iloc[valid_idx], frame.iloc[test_idx]
        )
    if task_type != "regression":
        _check_split_classes(train_part, valid_part, test_part, target)

    files = {
        "train.csv": csv_bytes(train_part),
        "valid.csv": csv_bytes(valid_part.drop(columns=[target])),
        "test.csv": csv_bytes(test_part.drop(columns=[target])),
        "valid_labels.csv": csv_bytes(valid_part[[target]]),
        "test_labels.csv": csv_bytes(test_part[[target]]),
    }
    text = spec.text.strip() or default_statement(target, task_type, data_path.name)
    return _assemble(
        files, target=target, task_type=task_type, metric=metric, labels=labels, seed=seed,
        text=text, description=None, dropped=dropped,
    )


def save_task(task: PreparedTask, directory: Path) -> None:
    """Write the split files, description.md and task.json: a run's task/ folder."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in SPLIT_FILES:
        write_atomic(directory / name, task.split_files[name])
    write_atomic(directory / "description.md", task.description.encode("utf-8"))
    meta = {
        "format": TASK_FORMAT,
        "target": task.target,
        "task_type": task.task_type,
        "metric": task.metric.name,
        "labels": list(task.labels),
        "seed": task.seed,
        "data_hash": task.data_hash,
        "text": task.text,
        "rows": {"train": len(task.train), "valid": len(task.valid_X), "test": len(task.test_X)},
    }
    # task.json last: its presence says the folder is complete.
    write_atomic(directory / "task.json", (json.dumps(meta, indent=2) + "\n").encode("utf-8"))


def load_task(directory: Path) -> PreparedTask:
    """Read a folder written by save_task; raise StoreError if it is incomplete or was changed."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "task.json").read_text(encoding="utf-8"))
        files = {name: (directory / name).read_bytes() for name in SPLIT_FILES}
        description = (directory / "description.md").read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise StoreError(f"task folder {directory} is unreadable: {one_line(exc)}") from exc
    try:
        target = str(meta["target"])
        task_type = str(meta["task_type"])
        metric = METRICS[meta["metric"]]
        labels = tuple(str(label) for label in meta["labels"])
        seed = int(meta["seed"])
        expected = str(meta["data_hash"])
        text = str(meta.get("text", ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{directory / 'task.json'} is malformed: {one_line(exc)}") from exc
    found = hash_split_files(files)
    if found != expected:
        raise StoreError(
            f"task folder {directory} does not match its task.json: data hash {found[:12]} "
            f"!= {expected[:12]}; the split files were changed after the run started"
        )
    return _assemble(
        files, target=target, task_type=task_type, metric=metric, labels=labels, seed=seed,
        text=text, description=description, dropped=0,
    )


def hash_split_files(files: Mapping[str, bytes]) -> str:
    """sha256 over SPLIT_FILES in order, each framed by its name and length."""
    digest = hashlib.sha256()
    for name in SPLIT_FILES:
        data = files[name]
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


# --- labels -----------------------------------------------------------------------------------


def sorted_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """Sort labels numerically when all are integers ('2' before '10'), else as strings."""
    unique = set(labels)
    if unique and all(_INTEGER.fullmatch(label) for label in unique):
        return tuple(sorted(unique, key=int))
    return tuple(sorted(unique))


# --- files ------------------------------------------------------------------------------------


# Frames of at least this many rows are written by Arrow's CSV writer: a million-row table's
# split files in 2 s instead of 13 to 16 s (benchmarks/results/big-data-2026-12-07); pandas'
# is the faster on small frames (a one-row request: 0.16 ms against 1 ms).
ARROW_CSV_ROWS = 10_000


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """A frame as the CSV bytes every input file is written as (no index, UTF-8), which
    `pd.read_csv` reads back as the same values and types. An explicit line terminator: the
    bytes, and so the task's hash, must not depend on the OS."""
    if len(frame) >= ARROW_CSV_ROWS and (written := _arrow_csv(frame)) is not None:
        return written
    return frame.to_csv(index=False, lineterminator="\n").encode("utf-8")


def _arrow_csv(frame: pd.DataFrame) -> bytes | None:
    """`frame` written by Arrow under pandas' own header; None when a column is not numbers,
    booleans or text (a date, mixed Python objects), which Arrow writes otherwise."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    if frame.columns.has_duplicates:
        return None
    columns = {}
    for name, column in frame.items():
        if (column.dtype.kind == "f" and column.notna().all()
                and (column.iloc[:1000] % 1 == 0).all() and (column % 1 == 0).all()):
            # Arrow writes 3.0 as "3", which reads back as an integer: pandas' text keeps
            # the column a float. (Most float columns show a fraction in their first rows.)
            column = column.astype(str)
        columns[name] = column
    try:
        table = pa.Table.from_pandas(pd.DataFrame(columns, copy=False), preserve_index=False)
        if not all(_plain(t.value_type if pa.types.is_dictionary(t) else t)
                   for t in table.schema.types):  # a category's levels: their type
            return None
        out = io.BytesIO()
        out.write(frame.head(0).to_csv(index=False, lineterminator="\n").encode("utf-8"))
        pa_csv.write_csv(table, out, pa_csv.WriteOptions(include_header=False))
    except (pa.ArrowException, TypeError, ValueError):
        return None
    return out.getvalue()


def _plain(arrow_type: Any) -> bool:
    """Numbers, booleans, text or nothing: what Arrow writes as pandas does."""
    import pyarrow as pa

    return bool(pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)
                or pa.types.is_boolean(arrow_type) or pa.types.is_string(arrow_type)
                or pa.types.is_large_string(arrow_type) or pa.types.is_null(arrow_type))


def _read_bytes_csv(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), low_memory=False)


def _assemble(
    files: Mapping[str, bytes],
    *,
    target: str,
    task_type: str,
    metric: MetricSpec,
    labels: tuple[str, ...],
    seed: int,
    text: str,
    description: str | None,
    dropped: int,
) -> PreparedTask:
    # Both prepare_task and load_task build the task from the bytes, so they agree exactly.
    train = _read_bytes_csv(files["train.csv"])
    valid_x = _read_bytes_csv(files["valid.csv"])
    test_x = _read_bytes_csv(files["test.csv"])
    valid_y = _read_bytes_csv(files["valid_labels.csv"])[target]
    test_y = _read_bytes_csv(files["test_labels.csv"])[target]
    task = PreparedTask(
        target=target, task_type=task_type, metric=metric, labels=labels, train=train,
        valid_X=valid_x, test_X=test_x, valid_y=valid_y, test_y=test_y, description="",
        data_hash=hash_split_files(files), seed=seed,
        split_files={name: files[name] for name in SPLIT_FILES}, text=text,
    )
    if description is None:
        facts = column_facts(train, target)
        return replace(task, description=render_description(task, facts, dropped)).knowing(facts)
    return replace(task, description=description)


def _strata(target: pd.Series, task_type: str) -> np.ndarray | None:
    """The class of each row as an integer code, in the order of the labels' text: the split
    sklearn makes of the texts, made without sorting millions of strings (12.8 M rows: 25 s of
    a 2 GB file's start-up, benchmarks/results/big-data-2026-12-07b)."""
    if task_type == "regression":
        return None
    codes, _ = pd.factorize(label_strs(target), sort=True)
    return codes


def _split(
    idx: np.ndarray, strata: np.ndarray | None, share: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    if strata is not None:
        # A class with one member (or fewer members than the split has classes) cannot be
        # stratified; an unstratified split is better than refusing the data.
        with contextlib.suppress(ValueError):
            kept, held = train_test_split(
                idx, test_size=share, random_state=seed, stratify=strata[idx]
            )
            return np.asarray(kept), np.asarray(held)
    kept, held = train_test_split(idx, test_size=share, random_state=seed)
    return np.asarray(kept), np.asarray(held)


def _check_split_classes(
    train: pd.DataFrame, valid: pd.DataFrame, test: pd.DataFrame, target: str
) -> None:
    # A split with one class cannot be learned from (train) or has no defined AUC (valid, test).
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        if part[target].nunique() < 2:
            raise UserError(
                f"the {name} split has only one class of `{target}` ({len(part)} rows); "
                "the data needs more rows of each class"
            )
