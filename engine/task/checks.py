"""Reading and checking the user's CSVs for a task: the file, its header, the target column,
the task type and the metric. Every bad input is a `UserError` with one line that says what is
wrong and how to fix it (engine/task/prepare.py `prepare_task` calls these before anything is
written).
"""

from __future__ import annotations

import codecs
import csv
import difflib
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from common.errors import UserError
from common.metric import DEFAULT_METRIC, METRICS, MetricSpec, label_str

# Larger files than this are refused rather than read: 10-minute runs of a 2 GB CSV peaked at 7.7
# and 8.6 times its size, the driver's reading and splitting at 5.3 times, the answer's refit
# reading rows again beside it (benchmarks/results/big-data-2026-12-07b).
MAX_DATA_BYTES = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 12
# Below this a 60/20/20 split leaves single-row splits on which no metric means anything.
MIN_ROWS = 10
# A non-numeric target with more distinct values than this is an id or free text, not a class.
MAX_CLASSES = 200
# An integer target is treated as classes (e.g. wine quality 3..9) only when it has few distinct
# values, each repeated many times; otherwise it is a count or an amount to regress.
MAX_INTEGER_CLASSES = 20
MAX_INTEGER_CLASS_SHARE = 0.05
_METRIC_ALIASES = {"auc": "roc_auc", "logloss": "log_loss", "acc": "accuracy"}


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


def read_csv(path: Path, role: str) -> pd.DataFrame:
    """The user's CSV as a frame, or a UserError saying what is wrong with the file."""
    if not path.exists():
        raise UserError(f"{role} {path} does not exist; check the path (working dir {Path.cwd()})")
    if path.is_dir():
        raise UserError(f"{role} {path} is a directory; pass the path of the CSV file inside it")
    if not path.is_file():
        raise UserError(f"{role} {path} is not a regular file; pass a CSV file")
    size = path.stat().st_size
    if size > MAX_DATA_BYTES:
        raise UserError(
            f"{role} {path} is {_size(size)}, over the {_size(MAX_DATA_BYTES)} this machine's "
            "memory can search (a twelfth of it); pass a sample of it (e.g. pandas "
            "df.sample(n=...).to_csv(...))"
        )
    header = _raw_header(path, role)
    if not any(name.strip() for name in header):
        raise UserError(f"{role} {path} is empty; it needs a header line and rows of data")
    duplicates = [name for name, count in Counter(header).items() if count > 1]
    if duplicates:
        raise UserError(
            f"{role} {path} has duplicate column names: {', '.join(map(repr, duplicates))}; "
            "rename them so every column name is unique"
        )
    try:
        # Parsed from the file: its bytes, text and a StringIO held at once took 8 GiB for a
        # 1 GB CSV against 3 GiB (benchmarks/results/big-data-2026-12-07b).
        # utf-8-sig is utf-8 that also drops a leading byte-order mark (Excel writes one).
        frame = pd.read_csv(path, low_memory=False, encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise _not_utf8(path, role) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise UserError(
            f"{role} {path} is not a readable CSV ({one_line(exc)}); fix it so every row has "
            "as many comma-separated fields as the header"
        ) from exc
    except OSError as exc:
        raise _unreadable(path, role, exc) from exc
    if len(frame) == 0:
        raise UserError(f"{role} {path} has a header but no data rows")
    return frame


def _raw_header(path: Path, role: str) -> list[str]:
    """The first line with a field, as written (pandas renames a repeated column `a` to `a.1`;
    the header as written shows the repeat); [] for a file of blank lines. Reads only as far
    as that line."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as file:
            for row in csv.reader(file):
                if any(field.strip() for field in row):
                    return row
    except UnicodeDecodeError:
        raise _not_utf8(path, role) from None
    except csv.Error as exc:
        message = f"{role} {path} is not a readable CSV ({exc}); fix its header line"
        raise UserError(message) from exc
    except OSError as exc:
        raise _unreadable(path, role, exc) from exc
    return []


def _not_utf8(path: Path, role: str) -> UserError:
    """The error for a file that is not UTF-8, naming its first bad byte and its offset (found
    by decoding the file a chunk at a time)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, where = 0, "it ends inside a character"
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                where = (f"byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{offset - pending + exc.start}")
                break
            offset += len(chunk)
    return UserError(f"{role} {path} is not UTF-8 text ({where}); re-save it as a UTF-8 CSV, "
                     "e.g. df.to_csv(path, encoding='utf-8')")


def _unreadable(path: Path, role: str, exc: OSError) -> UserError:
    return UserError(f"cannot read {role} {path}: {exc.strerror}; check its permissions")


def check_target_column(frame: pd.DataFrame, target: str, path: Path) -> None:
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


def drop_missing_target(frame: pd.DataFrame, target: str, path: Path) -> tuple[pd.DataFrame, int]:
    missing = frame[target].isna()
    if missing.all():
        raise UserError(
            f"target column `{target}` of {path} is empty in every row; fill it in or "
            "choose another target"
        )
    return frame.loc[~missing].reset_index(drop=True), int(missing.sum())


def integer_labels(target: pd.Series) -> pd.Series:
    # A class column with a missing value is parsed as float (1.0, 2.0); once those rows are
    # dropped, write it back as the integers the user's file had.
    if pd.api.types.is_float_dtype(target):
        return target.astype("int64")
    return target


def read_test_frame(
    path: Path, frame: pd.DataFrame, target: str, labels: tuple[str, ...], task_type: str
) -> tuple[pd.DataFrame, int]:
    test = read_csv(path, "test file")
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


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
