"""Task preparation: read the user's CSV, check it, split it, and describe it.

`prepare_task` turns a `TaskSpec` (a CSV, a target column, optionally a test CSV and a metric)
into a `PreparedTask`: the task type, the metric, fixed train/valid/test splits, the hidden
valid/test labels, the `description.md` a candidate reads and a short `preview` for prompts.
Every bad input is a `UserError` with one line that says what is wrong and how to fix it, and
nothing is written before all checks pass.

The split files are kept as the exact bytes a candidate sees (`split_files`), and the frames are
parsed back from those bytes, so a task prepared now and the same task loaded from
`runs/<id>/task/` are identical, and `data_hash` is a hash of what was actually shown.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import hashlib
import inspect
import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from fileio import write_atomic
from search.errors import StoreError, UserError
from search.metric import DEFAULT_METRIC, METRICS, MetricSpec, label_str, positive_label
from search.node import PROBA_PREFIX

# Larger files than this are refused rather than read: a CSV loads at several times its size in
# memory, once in the driver and again in every candidate's process.
MAX_DATA_BYTES = 1 << 30
# Below this a 60/20/20 split leaves single-row splits on which no metric means anything.
MIN_ROWS = 10
# A non-numeric target with more distinct values than this is an id or free text, not a class.
MAX_CLASSES = 200
# An integer target is treated as classes (e.g. wine quality 3..9) only when it has few distinct
# values, each repeated many times; otherwise it is a count or an amount to regress.
MAX_INTEGER_CLASSES = 20
MAX_INTEGER_CLASS_SHARE = 0.05
TEST_SHARE = 0.2
VALID_SHARE = 0.2
# VALID_SHARE of the whole is this share of what is left once test is set apart (0.25); a given
# test file leaves the data to split the same 60:20 way.
_VALID_OF_REST = VALID_SHARE / (1 - TEST_SHARE)

# The files hashed into data_hash, in the order they are hashed. Labels stay in the run's task/
# folder; only the first three go into a candidate's input/.
SPLIT_FILES = ("train.csv", "valid.csv", "test.csv", "valid_labels.csv", "test_labels.csv")
INPUT_FILES = ("train.csv", "valid.csv", "test.csv", "description.md")
LIBRARIES = ("pandas", "scikit-learn", "lightgbm", "optuna", "numpy")
# Binary labels that name the positive class outright; otherwise the last sorted label is it.
TASK_FORMAT = 1

_INTEGER = re.compile(r"[+-]?\d+")
_METRIC_ALIASES = {"auc": "roc_auc", "logloss": "log_loss", "acc": "accuracy"}
# The preview goes into every prompt that a small model reads at ~35 tokens/s: keep it short.
_PREVIEW_COLUMNS = 22
_PREVIEW_LINE_CHARS = 240
_DESCRIPTION_COLUMNS = 200


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

    @property
    def has_text_features(self) -> bool:
        """Whether a feature column holds text (anything pandas does not read as numbers)."""
        features = self.train.drop(columns=[self.target])
        return len(features.select_dtypes(exclude="number").columns) > 0

    @property
    def positive_label(self) -> str | None:
        return positive_label(self.labels) if self.task_type == "binary" else None

    @cached_property
    def _preview(self) -> str:
        # Computed once per task: column statistics of a large train frame are not free, and the
        # preview is asked for on every prompt.
        return _render_preview(self, _column_facts(self.train, self.target))


def prepare_task(spec: TaskSpec, seed: int = 0) -> PreparedTask:
    """Read, check, type, split and describe the data of `spec`; raise UserError on bad input."""
    data_path = Path(spec.data).expanduser()
    frame = _read_csv(data_path, "data file")
    target = spec.target
    _check_target_column(frame, target, data_path)
    if len(frame.columns) < 2:
        raise UserError(
            f"data file {data_path} has only the target column `{target}`; "
            "it needs at least one feature column to predict from"
        )
    frame, dropped = _drop_missing_target(frame, target, data_path)
    if len(frame) < MIN_ROWS:
        raise UserError(
            f"data file {data_path} has {len(frame)} rows with a value in `{target}`; "
            f"at least {MIN_ROWS} are needed to split it into train, valid and test"
        )
    task_type = stated_task_type(spec.task_type, frame[target], target)
    metric = resolve_metric(spec.metric, task_type)
    if task_type != "regression":
        frame[target] = _integer_labels(frame[target])
        labels = sorted_labels(label_str(v) for v in frame[target].unique())
    else:
        labels = ()

    if spec.test is not None:
        test_path = Path(spec.test).expanduser()
        test_frame, test_dropped = _read_test_frame(test_path, frame, target, labels, task_type)
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
    text = spec.text.strip() or _default_statement(target, task_type, data_path.name)
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
        raise StoreError(f"task folder {directory} is unreadable: {_one_line(exc)}") from exc
    try:
        target = str(meta["target"])
        task_type = str(meta["task_type"])
        metric = METRICS[meta["metric"]]
        labels = tuple(str(label) for label in meta["labels"])
        seed = int(meta["seed"])
        expected = str(meta["data_hash"])
        text = str(meta.get("text", ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{directory / 'task.json'} is malformed: {_one_line(exc)}") from exc
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


# --- checks and inference ---------------------------------------------------------------------


def infer_task_type(target: pd.Series, name: str = "target") -> str:
    """binary, multiclass or regression from the (non-missing) target values."""
    values = target.dropna()
    distinct = values.nunique()
    if distinct < 2:
        shown = repr(label_str(values.iloc[0])) if len(values) else "nothing"
        raise UserError(
            f"target `{name}` has one value ({shown}) in every row, so there is nothing to "
            "predict; choose a target column whose values vary"
        )
    if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values):
        if distinct > MAX_CLASSES:
            numbers = pd.to_numeric(values, errors="coerce")
            odd = list(dict.fromkeys(values[numbers.isna()].astype(str)))[:3]
            raise UserError(
                f"target `{name}` has {distinct} distinct non-numeric values, more than the "
                f"{MAX_CLASSES} classes a classification task may have; if it is a number, "
                f"fix entries such as {', '.join(map(repr, odd))}, else choose another target"
            )
        return "binary" if distinct == 2 else "multiclass"
    floats = values.to_numpy(dtype=float)
    if not np.isfinite(floats).all():
        raise UserError(
            f"target `{name}` has {int((~np.isfinite(floats)).sum())} infinite values; "
            "remove those rows or replace them with a number"
        )
    integer = bool((floats == np.round(floats)).all())
    if integer and distinct <= 2:
        return "binary"
    if (
        integer
        and distinct <= MAX_INTEGER_CLASSES
        and distinct / len(values) < MAX_INTEGER_CLASS_SHARE
    ):
        return "multiclass"
    return "regression"


def stated_task_type(stated: str | None, target: pd.Series, name: str = "target") -> str:
    """The task type the user stated ("classification" or "regression"), checked against the
    target, or the inferred one. Stating it settles the one case inference can get wrong: an
    integer target with few values (a rating 1..5) is classes unless "regression" is stated."""
    inferred = infer_task_type(target, name)
    if stated is None or stated == inferred or (
            stated == "classification" and inferred != "regression"):
        return inferred
    values = target.dropna()
    distinct = int(values.nunique())
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    if stated == "regression":
        if numeric:
            return "regression"
        raise UserError(
            f"the task asks for regression, but target `{name}` is not numeric ({distinct} "
            "distinct values such as "
            f"{', '.join(repr(label_str(v)) for v in values.unique()[:3])}); ask for "
            "classification or choose a numeric target"
        )
    floats = values.to_numpy(dtype=float)
    if bool((floats == np.round(floats)).all()) and distinct <= MAX_CLASSES:
        return "binary" if distinct == 2 else "multiclass"
    raise UserError(
        f"the task asks for classification, but target `{name}` is a continuous number "
        f"({distinct} distinct values); ask for regression, or bin the target into classes"
    )


def resolve_metric(name: str | None, task_type: str) -> MetricSpec:
    """The named metric (or the task type's default), checked against the task type."""
    if name is None or not name.strip():
        return METRICS[DEFAULT_METRIC[task_type]]
    key = name.strip().lower().replace("-", "_")
    key = _METRIC_ALIASES.get(key, key)
    fitting = [m for m, spec in METRICS.items() if task_type in spec.task_types]
    if key not in METRICS:
        raise UserError(
            f"unknown metric {name!r}; known metrics: {', '.join(METRICS)} "
            f"(for this {task_type} task: {', '.join(fitting)})"
        )
    spec = METRICS[key]
    if task_type not in spec.task_types:
        raise UserError(
            f"metric {spec.name!r} is for {' or '.join(spec.task_types)} tasks, but this target "
            f"is {task_type}; use one of {', '.join(fitting)}"
        )
    return spec


def _read_csv(path: Path, role: str) -> pd.DataFrame:
    if not path.exists():
        raise UserError(f"{role} {path} does not exist; check the path (working dir {Path.cwd()})")
    if path.is_dir():
        raise UserError(f"{role} {path} is a directory; pass the path of the CSV file inside it")
    if not path.is_file():
        raise UserError(f"{role} {path} is not a regular file; pass a CSV file")
    size = path.stat().st_size
    if size > MAX_DATA_BYTES:
        raise UserError(
            f"{role} {path} is {_size(size)}, over the {_size(MAX_DATA_BYTES)} limit; "
            "pass a sample of it (e.g. pandas df.sample(n=...).to_csv(...))"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        message = f"cannot read {role} {path}: {exc.strerror}; check its permissions"
        raise UserError(message) from exc
    try:
        # utf-8-sig is utf-8 that also drops a leading byte-order mark (Excel writes one).
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{role} {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start}); re-save it as a UTF-8 CSV, e.g. df.to_csv(path, encoding='utf-8')"
        ) from exc
    del raw
    if not text.strip():
        raise UserError(f"{role} {path} is empty; it needs a header line and rows of data")
    header = _raw_header(text, path, role)
    duplicates = [name for name, count in Counter(header).items() if count > 1]
    if duplicates:
        raise UserError(
            f"{role} {path} has duplicate column names: {', '.join(map(repr, duplicates))}; "
            "rename them so every column name is unique"
        )
    try:
        frame = pd.read_csv(io.StringIO(text), low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise UserError(
            f"{role} {path} is not a readable CSV ({_one_line(exc)}); fix it so every row has "
            "as many comma-separated fields as the header"
        ) from exc
    if len(frame) == 0:
        raise UserError(f"{role} {path} has a header but no data rows")
    return frame


def _raw_header(text: str, path: Path, role: str) -> list[str]:
    # pandas renames a repeated column `a` to `a.1`; the header as written shows the repeat.
    try:
        for row in csv.reader(io.StringIO(text)):
            if row:
                return row
    except csv.Error as exc:
        message = f"{role} {path} is not a readable CSV ({exc}); fix its header line"
        raise UserError(message) from exc
    return []


def _check_target_column(frame: pd.DataFrame, target: str, path: Path) -> None:
    if target in frame.columns:
        return
    columns = [str(c) for c in frame.columns]
    if len(columns) == 1 and (";" in columns[0] or "\t" in columns[0]):
        sep = "';'" if ";" in columns[0] else "tabs"
        raise UserError(
            f"data file {path} has one column; it looks separated by {sep}, "
            "re-save it with commas (e.g. df.to_csv(path, index=False))"
        )
    same_case = [c for c in columns if c.strip().lower() == target.strip().lower()]
    close = same_case + [
        c for c in difflib.get_close_matches(target, columns, n=3, cutoff=0.6)
        if c not in same_case
    ]
    hint = f"did you mean {', '.join(f'`{c}`' for c in close)}? " if close else ""
    shown = ", ".join(columns[:15])
    if len(columns) > 15:
        shown += f", ... ({len(columns)} in all)"
    raise UserError(f"target column `{target}` is not in {path}; {hint}columns: {shown}")


def _drop_missing_target(frame: pd.DataFrame, target: str, path: Path) -> tuple[pd.DataFrame, int]:
    missing = frame[target].isna()
    if missing.all():
        raise UserError(
            f"target column `{target}` of {path} is empty in every row; fill it in or "
            "choose another target"
        )
    return frame.loc[~missing].reset_index(drop=True), int(missing.sum())


def _integer_labels(target: pd.Series) -> pd.Series:
    # A class column with a missing value is parsed as float (1.0, 2.0); once those rows are
    # dropped, write it back as the integers the user's file had.
    if pd.api.types.is_float_dtype(target):
        return target.astype("int64")
    return target


def _read_test_frame(
    path: Path, frame: pd.DataFrame, target: str, labels: tuple[str, ...], task_type: str
) -> tuple[pd.DataFrame, int]:
    test = _read_csv(path, "test file")
    if target not in test.columns:
        raise UserError(
            f"test file {path} has no target column `{target}`; its labels are needed to score "
            "the test split (or leave out the test file and one is split off the data)"
        )
    missing = [str(c) for c in frame.columns if c not in test.columns]
    extra = [str(c) for c in test.columns if c not in frame.columns]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"lacks {', '.join(missing[:10])}")
        if extra:
            parts.append(f"has extra {', '.join(extra[:10])}")
        raise UserError(
            f"test file {path} {' and '.join(parts)}; it needs the same columns as the data file"
        )
    test = test[list(frame.columns)]
    absent = test[target].isna()
    if absent.all():
        raise UserError(f"target column `{target}` of test file {path} is empty in every row")
    test = test.loc[~absent].reset_index(drop=True)
    if task_type == "regression":
        if not pd.api.types.is_numeric_dtype(test[target]) or pd.api.types.is_bool_dtype(
            test[target]
        ):
            raise UserError(
                f"target `{target}` of test file {path} is not numeric but the data file's is; "
                "fix the non-numeric entries of the test file"
            )
    else:
        if pd.api.types.is_float_dtype(test[target]):
            values = test[target].to_numpy(dtype=float)
            if (values == np.round(values)).all():
                test[target] = test[target].astype("int64")
        unknown = sorted({label_str(v) for v in test[target].unique()} - set(labels))
        if unknown:
            raise UserError(
                f"test file {path} has target labels the data file never has: "
                f"{', '.join(map(repr, unknown[:5]))}; no model could learn them"
            )
    return test, int(absent.sum())


def _strata(target: pd.Series, task_type: str) -> np.ndarray | None:
    if task_type == "regression":
        return None
    return np.asarray([label_str(v) for v in target], dtype=object)


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


# --- files ------------------------------------------------------------------------------------


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """A frame as the CSV bytes every input file is written as (no index, UTF-8). An explicit
    line terminator: the bytes, and so the task's hash, must not depend on the OS."""
    return frame.to_csv(index=False, lineterminator="\n").encode("utf-8")


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
        description = _render_description(task, _column_facts(train, target), dropped)
    return replace(task, description=description)


# --- description and preview ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ColumnFacts:
    name: str
    dtype: str
    missing_pct: float
    unique: int
    numeric: bool
    detail: str  # "min .. max" for numbers, top values for the rest


def _column_facts(frame: pd.DataFrame, target: str) -> list[_ColumnFacts]:
    facts = []
    for name in frame.columns:
        if name == target:
            continue
        column = frame[name]
        numeric = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
        present = column.dropna()
        if present.empty:
            detail = "all missing"
        elif numeric:
            detail = f"{_num(present.min())} .. {_num(present.max())}"
        else:
            top = present.astype(str).value_counts().head(3)
            detail = ", ".join(f"{_clip(str(v), 24)!r} ({n})" for v, n in top.items())
        facts.append(
            _ColumnFacts(
                name=str(name),
                dtype=str(column.dtype),
                missing_pct=100.0 * float(column.isna().mean()) if len(column) else 0.0,
                unique=int(present.nunique()),
                numeric=numeric,
                detail=detail,
            )
        )
    return facts


def _default_statement(target: str, task_type: str, source: str) -> str:
    kind = {
        "binary": "binary classification: one of two classes",
        "multiclass": "multiclass classification: one of several classes",
        "regression": "regression: a number",
    }[task_type]
    return f"Predict the column `{target}` of {source} from the other columns ({kind})."


def _direction(metric: MetricSpec) -> str:
    return "higher is better" if metric.maximize else "lower is better"


def _proba_columns(task: PreparedTask) -> list[str]:
    return [f"{PROBA_PREFIX}{label}" for label in task.labels]


def _metric_line(task: PreparedTask) -> str:
    line = f"{task.metric.name} ({task.metric.description}), {_direction(task.metric)}"
    if task.positive_label is not None and task.metric.name == "f1":
        line += f"; the positive class is {task.positive_label!r}"
    return line


def _prediction_rule(task: PreparedTask) -> str:
    if task.task_type == "regression":
        return "column `prediction` holds the predicted number"
    rule = "column `prediction` holds a class label, written exactly as in train.csv"
    if task.metric.needs_proba:
        cols = _proba_columns(task)
        if task.task_type == "binary":
            rule += (
                f", plus {PROBA_PREFIX}<label> columns with class probabilities "
                f"({task.metric.name} needs them; at least {PROBA_PREFIX}{task.positive_label}, "
                "the positive class)"
            )
        else:
            shown = ", ".join(cols[:8]) + (", ..." if len(cols) > 8 else "")
            rule += (
                f", plus one {PROBA_PREFIX}<label> column per class ({shown}) with probabilities "
                f"in [0, 1]; {task.metric.name} is computed from them"
            )
    return rule


def _target_summary(task: PreparedTask) -> list[str]:
    column = task.train[task.target]
    if task.task_type == "regression":
        values = column.astype(float)
        return [
            f"min {_num(values.min())}, mean {_num(values.mean())}, median "
            f"{_num(values.median())}, max {_num(values.max())}, std {_num(values.std())}"
        ]
    counts = Counter(label_str(v) for v in column)
    total = len(column)
    return [
        f"{label!r}: {counts.get(label, 0)} ({100.0 * counts.get(label, 0) / total:.1f}%)"
        for label in task.labels
    ]


def _versions() -> list[tuple[str, str]]:
    found = []
    for name in LIBRARIES:
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            found.append((name, "not installed"))
    return found


def _api_notes() -> list[str]:
    """Pitfalls of the installed versions that generated code often hits, found by inspection
    (not by version number) so a note is only given when it is true here."""
    notes = []
    from sklearn.metrics import mean_squared_error
    from sklearn.preprocessing import OneHotEncoder

    if "squared" not in inspect.signature(mean_squared_error).parameters:
        notes.append(
            "sklearn mean_squared_error has no `squared=`; use "
            "sklearn.metrics.root_mean_squared_error for RMSE"
        )
    if "sparse" not in inspect.signature(OneHotEncoder).parameters:
        notes.append("sklearn OneHotEncoder takes `sparse_output=`, not `sparse=`")
    try:
        import lightgbm
    except ImportError:
        pass
    else:
        if "early_stopping_rounds" not in inspect.signature(lightgbm.LGBMModel.fit).parameters:
            notes.append(
                "lightgbm fit() takes no `early_stopping_rounds`/`verbose`; use callbacks="
                "[lightgbm.early_stopping(50), lightgbm.log_evaluation(0)]"
            )
    if not hasattr(pd.DataFrame, "append"):
        notes.append("pandas DataFrame.append does not exist; use pd.concat")
    return notes


def _render_description(task: PreparedTask, facts: list[_ColumnFacts], dropped: int) -> str:
    rows = (len(task.train), len(task.valid_X), len(task.test_X))
    out = ["# Task", "", task.text, "", "## Target and metric", ""]
    out.append(f"- target column: `{task.target}`")
    out.append(f"- task type: {task.task_type}")
    if task.labels:
        out.append(f"- classes ({len(task.labels)}): {', '.join(map(repr, task.labels))}")
    out.append(f"- metric: {_metric_line(task)}")
    if task.metric.needs_proba:
        out.append(
            f"- {task.metric.name} is computed from probabilities: write {PROBA_PREFIX}<label> "
            f"columns ({', '.join(_proba_columns(task)[:8])}"
            f"{', ...' if len(task.labels) > 8 else ''})"
        )
    out += [
        "",
        "## Files and what your code must write",
        "",
        "Your code runs in a fresh working directory that contains:",
        "",
        f"- `input/train.csv`: {rows[0]} rows, the feature columns plus the target `{task.target}`"
        " (the only labels you get)",
        f"- `input/valid.csv`: {rows[1]} rows, the feature columns only, row order fixed",
        f"- `input/test.csv`: {rows[2]} rows, the feature columns only, row order fixed",
        "- `input/description.md`: this file",
        "",
        "Write `submission/valid.csv` and `submission/test.csv` (create the `submission/` folder "
        "if it is missing): one row per row of `input/valid.csv` and `input/test.csv`, in the "
        f"same order, no index column; {_prediction_rule(task)}. The labels of valid and test "
        "are hidden: your valid predictions are scored with the metric above, and that score "
        "is the only one that counts (a score your code prints proves nothing).",
        "",
        f"Rows per split: train {rows[0]}, valid {rows[1]}, test {rows[2]}.",
    ]
    if dropped:
        out.append(f"{dropped} rows without a value of `{task.target}` were dropped beforehand.")
    out += ["", "## Columns of train.csv (features)", ""]
    out.append("| column | dtype | missing % | distinct | range / top values |")
    out.append("|---|---|---|---|---|")
    for fact in facts[:_DESCRIPTION_COLUMNS]:
        out.append(
            f"| {fact.name} | {fact.dtype} | {fact.missing_pct:.1f} | {fact.unique} | "
            f"{fact.detail.replace('|', '/')} |"
        )
    if len(facts) > _DESCRIPTION_COLUMNS:
        out.append(f"| ... {len(facts) - _DESCRIPTION_COLUMNS} more columns | | | | |")
    out += ["", f"## Target `{task.target}` in train.csv", ""]
    out += [f"- {line}" for line in _target_summary(task)]
    out += ["", "## Sample rows of train.csv", "", "```csv"]
    out += task.train.head(3).to_csv(index=False, lineterminator="\n").rstrip("\n").split("\n")
    out += ["```", "", "## Installed libraries", ""]
    out += [f"- {name} {version}" for name, version in _versions()]
    out += [
        "",
        "Write code for exactly these versions; APIs that older releases had may be gone:",
        "",
    ]
    out += [f"- {note}" for note in _api_notes()]
    return "\n".join(out) + "\n"


def _render_preview(task: PreparedTask, facts: list[_ColumnFacts]) -> str:
    rows = (len(task.train), len(task.valid_X), len(task.test_X))
    statement = _clip(" ".join(task.text.split()), _PREVIEW_LINE_CHARS)
    out = [f"Task: {statement}"]
    target = f"Target: `{task.target}` ({task.task_type}"
    if task.labels:
        shown = ", ".join(task.labels[:10]) + (", ..." if len(task.labels) > 10 else "")
        target += f", {len(task.labels)} classes: {shown}"
    out.append(target + ")")
    out.append(f"Metric: {_metric_line(task)}")
    out.append(
        f"Input: input/train.csv {rows[0]} rows (features + `{task.target}`); "
        f"input/valid.csv {rows[1]} and input/test.csv {rows[2]} rows (features only)"
    )
    out.append(
        "Output: submission/valid.csv and submission/test.csv, one row per input row in order; "
        + _prediction_rule(task)
    )
    out.append(f"Target in train: {'; '.join(_target_summary(task)[:10])}")
    numeric = sum(f.numeric for f in facts)
    out.append(f"Features ({len(facts)}: {numeric} numeric, {len(facts) - numeric} other):")
    listed = facts if len(facts) <= _PREVIEW_COLUMNS else facts[: _PREVIEW_COLUMNS - 1]
    for fact in listed:
        missing = f", {fact.missing_pct:.1f}% missing" if fact.missing_pct else ""
        out.append(
            _clip(f"- {fact.name}: {fact.dtype}{missing}, {fact.unique} distinct, {fact.detail}",
                  120)
        )
    if len(listed) < len(facts):
        out.append(f"- ... {len(facts) - len(listed)} more columns (see input/description.md)")
    out.append("Sample rows of train.csv:")
    sample = task.train.head(2).to_csv(index=False, lineterminator="\n").rstrip("\n")
    out += [_clip(line, _PREVIEW_LINE_CHARS) for line in sample.split("\n")[:3]]
    out.append("Libraries: " + ", ".join(f"{n} {v}" for n, v in _versions()))
    notes = _api_notes()
    if notes:
        out.append(_clip("API notes: " + "; ".join(notes), 2 * _PREVIEW_LINE_CHARS))
    return "\n".join(out) + "\n"


# --- small helpers ----------------------------------------------------------------------------


def _num(value: Any) -> str:
    return f"{float(value):.6g}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
