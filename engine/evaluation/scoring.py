"""Scoring a candidate's submission against the hidden labels, in the driver only.

`read_submission` checks a `submission/<split>.csv` against the harness contract and raises
`SubmissionError` with one exact, actionable message (it goes into the debug prompt as is);
`score` returns the raw metric value, by the formula of the metric table (`common.metric`).

Class labels are compared as strings; when every label is an integer, '1', '1.0' and ' 1 ' all
mean '1', and a label that matches only ignoring case ('true' for 'True') is accepted too. For
binary tasks proba_<positive> alone is enough (or proba_<negative>, read as 1 - p).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.metric import positive_label
from engine.task.prepare import PreparedTask
from search.node import PROBA_PREFIX

SPLITS = ("valid", "test")
# Written by some libraries for a missing value; a missing prediction is an error, not a label.
_MISSING_WORDS = frozenset({"", "nan", "na", "n/a", "none", "null"})
# A probability written as 1.0000000001 by float noise is still a probability.
_PROBA_TOLERANCE = 1e-6
_SHOW = 5  # how many offending values a message quotes


class SubmissionError(Exception):
    """A submission file is missing or breaks the contract; the message says exactly how.

    Not an EngineError: it is the candidate's failure, recorded as a buggy node.
    """


class _LabelMatcher:
    """Maps what a candidate wrote to one of the task's labels, or None."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels = tuple(labels)
        self._exact = set(self.labels)
        self._integer = bool(self.labels) and all(_is_integer(label) for label in self.labels)
        folded: dict[str, list[str]] = {}
        for label in self.labels:
            folded.setdefault(label.lower(), []).append(label)
        # Only unambiguous case-folds: labels 'a' and 'A' both exist -> no folding for them.
        self._folded = {key: found[0] for key, found in folded.items() if len(found) == 1}

    def match(self, written: str) -> str | None:
        text = written.strip()
        if text in self._exact:
            return text
        if self._integer:
            try:
                number = float(text)
            except ValueError:
                number = math.nan
            if math.isfinite(number) and number.is_integer():
                candidate = str(int(number))
                if candidate in self._exact:
                    return candidate
        return self._folded.get(text.lower())


def read_submission(task: PreparedTask, csv_bytes: bytes | None, split: str,
                    rows: int | None = None) -> pd.DataFrame:
    """Check a submission; return `prediction` (label strings or floats) and, when the metric
    needs them, `proba_<label>` float columns (for binary: the positive class's only).
    `rows` is how many it must have (default: the task's valid or test rows)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    name = f"submission/{split}.csv"
    source = f"input/{split}.csv"
    expected = rows if rows is not None else len(task.valid_X if split == "valid"
                                                 else task.test_X)
    if csv_bytes is None:
        raise SubmissionError(
            f"{name} was not written; write it with one row per row of {source} ({expected} "
            "rows, in order) and a column `prediction`"
        )
    return _checked(task, _parse(csv_bytes, name, expected), name, source, expected)


def _checked(task: PreparedTask, raw: pd.DataFrame, name: str, source: str,
             expected: int) -> pd.DataFrame:
    if "prediction" not in raw.columns:
        found = ", ".join(f"`{c}`" for c in list(raw.columns)[:10]) or "none"
        near = [c for c in raw.columns if str(c).strip().lower() == "prediction"]
        hint = f" (`{near[0]}` must be named exactly `prediction`)" if near else ""
        raise SubmissionError(
            f"{name} has no column `prediction`{hint}; columns found: {found}; write a header "
            "line, e.g. pd.DataFrame({'prediction': preds}).to_csv(path, index=False)"
        )
    if len(raw) != expected:
        raise SubmissionError(
            f"{name} has {len(raw)} rows; expected {expected} (one per row of {source}, in order)"
        )
    column = raw["prediction"]
    out = pd.DataFrame(index=pd.RangeIndex(expected))
    if task.task_type == "regression":
        out["prediction"] = _numbers(column, name, "prediction")
        return out
    matcher = _LabelMatcher(task.labels)
    written = column.fillna("").astype(str).str.strip()
    mapping = {value: matcher.match(value) for value in written.unique()}
    labels = written.map(mapping)
    missing = labels.isna() & written.str.lower().isin(_MISSING_WORDS)
    _no_missing(missing, name, "prediction")
    unknown = labels.isna()
    if unknown.any():
        bad = list(dict.fromkeys(written[unknown]))
        allowed = ", ".join(map(repr, task.labels[:20]))
        if len(task.labels) > 20:
            allowed += ", ..."
        raise SubmissionError(
            f"{name} has {int(unknown.sum())} predictions that are not labels of train.csv: "
            f"{', '.join(map(repr, bad[:_SHOW]))}; predict one of {allowed}"
        )
    out["prediction"] = labels.astype(object)
    if task.metric.needs_proba:
        for label, values in _probabilities(task, raw, matcher, name).items():
            out[f"{PROBA_PREFIX}{label}"] = values
    return out


def score(task: PreparedTask, csv_bytes: bytes | None, split: str) -> float:
    """The raw metric of a submission on the hidden `split` labels ("valid" or "test")."""
    submission = read_submission(task, csv_bytes, split)
    truth = task.valid_y if split == "valid" else task.test_y
    return submission_metric(task, submission, truth)


def score_train(task: PreparedTask, csv_bytes: bytes | None,
                labels: pd.Series | None = None) -> float | None:
    """The in-sample score of the harness's `submission/train.csv` (a `row` column naming rows
    of input/train.csv, then predictions as in valid.csv); None when absent or malformed: it
    only informs implementation verification and never makes a node buggy. `labels` are the
    labels of the rows of input/train.csv (default: the task's train split)."""
    if not csv_bytes:
        return None
    if labels is None:
        labels = task.train[task.target]
    try:
        raw = _parse(csv_bytes, "submission/train.csv", 1)
        rows = pd.to_numeric(raw.pop("row"), errors="raise").to_numpy()
        if len(rows) == 0 or rows.min() < 0 or rows.max() >= len(labels):
            return None
        submission = _checked(task, raw, "submission/train.csv", "input/train.csv", len(rows))
        truth = labels.iloc[rows.astype(int)].reset_index(drop=True)
        return submission_metric(task, submission, truth)
    except (SubmissionError, ValueError, KeyError, TypeError):
        return None


def submission_metric(task: PreparedTask, submission: pd.DataFrame, truth: pd.Series) -> float:
    """The raw metric of a checked submission (as `read_submission` returns it) on `truth`."""
    proba = class_probabilities(submission) if task.metric.needs_proba else None
    return task.metric.score(truth, submission["prediction"], proba, task.labels)


def class_probabilities(frame: pd.DataFrame) -> pd.DataFrame:
    """The probability columns of a checked prediction frame, each named by its class."""
    columns = [c for c in frame.columns if c.startswith(PROBA_PREFIX)]
    return frame[columns].rename(columns=lambda c: c.removeprefix(PROBA_PREFIX))


# --- across folds ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class HeldOut:
    """A node's predictions assembled over its folds: `valid` the checked out-of-fold
    predictions of the held-out dev rows (in dev order), `test` the test predictions combined
    over the fold models, and their raw scores."""

    valid: pd.DataFrame
    test: pd.DataFrame
    valid_raw: float
    test_raw: float


def combine_predictions(task: PreparedTask, frames: Sequence[pd.DataFrame],
                        weights: Sequence[float] | None = None) -> pd.DataFrame:
    """Checked predictions of the same rows (fold models, ensemble members), combined with
    `weights` (default equal): numbers and class probabilities averaged (the label then the
    most probable class), labels alone by weighted vote (a tie goes to the label first in the
    task's order)."""
    if weights is None and len(frames) == 1:
        return frames[0].reset_index(drop=True)
    w = np.ones(len(frames)) if weights is None else np.asarray(weights, dtype=float)
    w = w / w.sum()
    if task.task_type == "regression":
        return pd.DataFrame({"prediction": w @ np.stack(
            [f["prediction"].to_numpy(dtype=float) for f in frames])})
    columns = [c for c in frames[0].columns if c.startswith(PROBA_PREFIX)]
    if columns:
        proba = pd.DataFrame({c: w @ np.stack([f[c].to_numpy(dtype=float) for f in frames])
                              for c in columns})
        return pd.concat([pd.DataFrame({"prediction": labels_from_proba(task, proba)}), proba],
                         axis=1)
    votes = sum(wi * label_matrix(task, f["prediction"]) for wi, f in zip(w, frames, strict=True))
    return pd.DataFrame({"prediction": np.asarray(task.labels, dtype=object)[
        np.asarray(votes).argmax(axis=1)]})


def label_matrix(task: PreparedTask, labels: pd.Series) -> np.ndarray:
    """One-hot rows over the task's labels, in its order (argmax then picks the first on a
    tie)."""
    index = {label: i for i, label in enumerate(task.labels)}
    out = np.zeros((len(labels), len(task.labels)))
    out[np.arange(len(labels)), [index[str(v)] for v in labels]] = 1.0
    return out


def labels_from_proba(task: PreparedTask, proba: pd.DataFrame) -> np.ndarray:
    """The most probable class of each row (binary with the positive class's column alone:
    positive from 0.5)."""
    return labels_from_matrix(task, proba.to_numpy(),
                              [c.removeprefix(PROBA_PREFIX) for c in proba.columns])


def labels_from_matrix(task: PreparedTask, matrix: np.ndarray,
                       classes: list[str]) -> np.ndarray:
    """`labels_from_proba` of probabilities held as a matrix whose columns are `classes`."""
    if len(classes) == 1:
        positive = positive_label(task.labels)
        negative = next(label for label in task.labels if label != positive)
        return np.where(matrix[:, 0] >= 0.5, positive, negative).astype(object)
    return np.asarray(classes, dtype=object)[matrix.argmax(axis=1)]


def read_stacked(task: PreparedTask, csv_bytes: bytes | None, split: str, rows: int,
                 folds: int) -> list[pd.DataFrame]:
    """A submission of `folds` blocks of `rows` rows, one per fold model, told apart by a
    `fold` column (engine-written code that ran every fold in one process)."""
    name = f"submission/{split}.csv"
    if csv_bytes is None:
        raise SubmissionError(f"{name} was not written")
    raw = _parse(csv_bytes, name, rows * folds)
    if "fold" not in raw.columns or len(raw) != rows * folds:
        raise SubmissionError(f"{name} must hold {folds} blocks of {rows} rows with a `fold` "
                              f"column; it has {len(raw)} rows, columns {_columns(raw)}")
    fold = pd.to_numeric(raw["fold"], errors="coerce").to_numpy()
    if np.isnan(fold).any():
        raise SubmissionError(f"{name}'s `fold` column must hold block numbers")
    # Checked whole (the checks cost the same for one block or all; they read only the
    # prediction and probability columns), then cut into blocks in block order (read as
    # text, "10" would sort before "2").
    checked = _checked(task, raw, name, f"input/{split}.csv", rows * folds)
    blocks = sorted(set(fold))
    if len(blocks) == folds and np.array_equal(fold, np.repeat(blocks, rows)):
        # Written block after block, as the harness writes them: slices, not masks (a
        # served one-row request pays every fixed cost here).
        return [checked.iloc[i * rows:(i + 1) * rows].reset_index(drop=True)
                for i in range(folds)]
    return [checked[fold == value].reset_index(drop=True) for value in blocks]


def score_held_out(task: PreparedTask, truth: pd.Series, valid: Sequence[pd.DataFrame],
                   valid_rows: Sequence[np.ndarray], tests: Sequence[pd.DataFrame]) -> HeldOut:
    """Assemble checked fold predictions (`valid[i]` predicts the dev rows `valid_rows[i]`)
    into out-of-fold predictions in dev order, combine the test predictions, score both."""
    order = np.argsort(np.concatenate(valid_rows), kind="stable")
    oof = pd.concat(valid, ignore_index=True).iloc[order].reset_index(drop=True)
    test = combine_predictions(task, tests)
    return HeldOut(oof, test, submission_metric(task, oof, truth.reset_index(drop=True)),
                   submission_metric(task, test, task.test_y))


def frame_csv(task: PreparedTask, frame: pd.DataFrame) -> bytes:
    """A checked prediction frame as submission CSV bytes (what `read_submission` reads),
    with a probability column per class in the task's order (a binary frame holds the
    positive class's alone)."""
    columns = [c for c in frame.columns if c.startswith(PROBA_PREFIX)]
    if task.task_type == "binary" and len(columns) == 1:
        positive = positive_label(task.labels)
        p = frame[f"{PROBA_PREFIX}{positive}"]
        frame = pd.concat([frame[["prediction"]]] + [
            (p if label == positive else 1.0 - p).rename(f"{PROBA_PREFIX}{label}")
            for label in task.labels], axis=1)
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


# --- parsing helpers --------------------------------------------------------------------------


def _parse(csv_bytes: bytes, name: str, expected: int) -> pd.DataFrame:
    if not csv_bytes.strip():
        raise SubmissionError(
            f"{name} is empty; write a header line with `prediction` and {expected} rows"
        )
    try:
        text = csv_bytes.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SubmissionError(
            f"{name} is not UTF-8 text (byte at offset {exc.start}); write it with "
            "DataFrame.to_csv(path, index=False)"
        ) from exc
    try:
        # Everything as text: labels like '007' or 'NA' must reach the label check unchanged.
        raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise SubmissionError(
            f"{name} could not be parsed as CSV ({detail}); write it with "
            "DataFrame.to_csv(path, index=False)"
        ) from exc
    raw.columns = [str(c).strip() for c in raw.columns]
    return raw


def _rows(mask: pd.Series | np.ndarray) -> str:
    # Data rows counted from 1, the header not counted, as a person reading the file would.
    flags = np.asarray(mask, dtype=bool)
    rows = [str(i + 1) for i in np.flatnonzero(flags)[:_SHOW]]
    return ", ".join(rows) + (", ..." if int(flags.sum()) > _SHOW else "")


def _no_missing(missing: pd.Series, name: str, column: str) -> None:
    if missing.any():
        raise SubmissionError(
            f"{name} has {int(missing.sum())} missing values in `{column}` (data rows "
            f"{_rows(missing)}); write a value for every row"
        )


def _numbers(column: pd.Series, name: str, label: str) -> pd.Series:
    # Every value a finite number as written, as in any submission that scores: parsed once
    # (a served one-row request pays every fixed cost here). Anything else: the checks below.
    quick = pd.to_numeric(column, errors="coerce")
    if quick.notna().all() and np.isfinite(quick.to_numpy(dtype=float)).all():
        return quick.astype(float)
    written = column.fillna("").astype(str).str.strip()
    values = pd.to_numeric(written, errors="coerce").astype(float)
    missing = written.str.lower().isin(_MISSING_WORDS)
    _no_missing(missing, name, label)
    bad = values.isna()
    if bad.any():
        shown = ", ".join(map(repr, list(dict.fromkeys(written[bad]))[:_SHOW]))
        raise SubmissionError(
            f"{name} has {int(bad.sum())} non-numeric values in `{label}`: {shown} (data rows "
            f"{_rows(bad)}); write numbers only"
        )
    infinite = ~np.isfinite(values.to_numpy())
    if infinite.any():
        raise SubmissionError(
            f"{name} has {int(infinite.sum())} infinite values in `{label}` (data rows "
            f"{_rows(infinite)}); write finite numbers"
        )
    return values


def _probabilities(
    task: PreparedTask, raw: pd.DataFrame, matcher: _LabelMatcher, name: str
) -> dict[str, pd.Series]:
    found: dict[str, str] = {}
    for column in raw.columns:
        if column.startswith(PROBA_PREFIX):
            label = matcher.match(column.removeprefix(PROBA_PREFIX))
            if label is not None and label not in found:
                found[label] = column
    metric = task.metric.name
    if task.task_type == "binary":
        positive = positive_label(task.labels)
        negative = next(label for label in task.labels if label != positive)
        if positive in found:
            return {positive: _probability(raw[found[positive]], name, found[positive])}
        if negative in found:
            return {positive: 1.0 - _probability(raw[found[negative]], name, found[negative])}
        raise SubmissionError(
            f"{name} has no column {PROBA_PREFIX}{positive} (probability of class {positive!r}), "
            f"which metric {metric} needs; columns found: {_columns(raw)}"
        )
    missing = [f"{PROBA_PREFIX}{label}" for label in task.labels if label not in found]
    if missing:
        raise SubmissionError(
            f"{name} lacks {', '.join(missing[:8])}{', ...' if len(missing) > 8 else ''}: "
            f"metric {metric} needs one {PROBA_PREFIX}<label> column per class "
            f"({len(task.labels)} classes; e.g. from model.predict_proba with model.classes_); "
            f"columns found: {_columns(raw)}"
        )
    return {label: _probability(raw[found[label]], name, found[label]) for label in task.labels}


def _probability(column: pd.Series, name: str, label: str) -> pd.Series:
    values = _numbers(column, name, label)
    outside = (values < -_PROBA_TOLERANCE) | (values > 1 + _PROBA_TOLERANCE)
    if outside.any():
        raise SubmissionError(
            f"{name} has {int(outside.sum())} values of `{label}` outside [0, 1] (data rows "
            f"{_rows(outside)}); write probabilities, e.g. from predict_proba"
        )
    return values.clip(0.0, 1.0)


def _columns(raw: pd.DataFrame) -> str:
    names = [f"`{c}`" for c in list(raw.columns)[:10]]
    return ", ".join(names) + (", ..." if len(raw.columns) > 10 else "")


def _is_integer(text: str) -> bool:
    stripped = text.strip().lstrip("+-")
    return stripped.isdigit()
