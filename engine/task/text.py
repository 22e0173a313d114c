"""What a task says about itself: `description.md`, the file every candidate reads beside its
data (the target, the metric and how predictions are scored, the columns, library versions),
and the short preview every prompt carries. Both are rendered once per task from its frames.
"""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pandas as pd

from common.metric import MetricSpec, label_strs
from search.node import PROBA_PREFIX

if TYPE_CHECKING:
    from engine.task.prepare import PreparedTask

LIBRARIES = ("pandas", "scikit-learn", "lightgbm", "optuna", "numpy")
# The preview goes into every prompt that a small model reads at ~35 tokens/s: keep it short.
_PREVIEW_COLUMNS = 22
_PREVIEW_LINE_CHARS = 240
_DESCRIPTION_COLUMNS = 200


# --- description and preview ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ColumnFacts:
    name: str
    dtype: str
    missing_pct: float
    unique: int
    numeric: bool
    detail: str  # "min .. max" for numbers, top values for the rest


def column_facts(frame: pd.DataFrame, target: str) -> list[_ColumnFacts]:
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


def default_statement(target: str, task_type: str, source: str) -> str:
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
    counts = Counter(label_strs(column))
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


def render_description(task: PreparedTask, facts: list[_ColumnFacts], dropped: int) -> str:
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


def render_preview(task: PreparedTask, facts: list[_ColumnFacts]) -> str:
    rows = (len(task.train), len(task.valid_X), len(task.test_X))
    out = _task_lines(task)
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
    out += _feature_lines(task, facts)
    out.append("Libraries: " + ", ".join(f"{n} {v}" for n, v in _versions()))
    notes = _api_notes()
    if notes:
        out.append(_clip("API notes: " + "; ".join(notes), 2 * _PREVIEW_LINE_CHARS))
    return "\n".join(out) + "\n"


def render_feature_preview(task: PreparedTask, facts: list[_ColumnFacts]) -> str:
    """What a feature program's prompt says of the task: what is predicted and the columns,
    without the files, libraries and API notes a whole script needs (shown them, the small
    model wrote a whole script instead of a function)."""
    # The sample rows without the target: shown it, the model wrote programs that read it.
    return "\n".join(_task_lines(task) + _feature_lines(task, facts, with_target=False)
                     + _related_lines(task, facts)) + "\n"


_RELATED_SHOWN = 8  # columns the feature preview names as most related to the target
# Rows the relation is measured on, at most (a seeded sample): on every row of a 2 GB table the
# ranks took 45 s of its start-up (benchmarks/results/big-data-2026-12-07b); on this many a
# |Spearman| is within about 0.003.
_RELATED_ROWS = 100_000


def _related_lines(task: PreparedTask, facts: list[_ColumnFacts]) -> list[str]:
    """The numeric columns most related to the target on the train rows (|Spearman|; on a
    sample of _RELATED_ROWS of them when there are more): where a program's new columns are
    likely to help. A number or two classes only; train labels alone (the valid and test
    labels never reach a prompt)."""
    if task.task_type == "multiclass":
        return []
    rows = task.train
    if len(rows) > _RELATED_ROWS:
        rows = rows.sample(n=_RELATED_ROWS, random_state=task.seed)
    target = rows[task.target]
    if task.task_type == "binary":
        target = (target.astype(str) == str(task.labels[-1])).astype(float)
    related = []
    for fact in facts:
        if not fact.numeric:
            continue
        value = rows[fact.name].corr(target, method="spearman")
        if pd.notna(value):
            related.append((abs(float(value)), fact.name))
    if not related:
        return []
    top = sorted(related, reverse=True)[:_RELATED_SHOWN]
    return ["Most related to the target on the train rows (|Spearman|): "
            + ", ".join(f"{name} {value:.2f}" for value, name in top)]


def _task_lines(task: PreparedTask) -> list[str]:
    statement = _clip(" ".join(task.text.split()), _PREVIEW_LINE_CHARS)
    target = f"Target: `{task.target}` ({task.task_type}"
    if task.labels:
        shown = ", ".join(task.labels[:10]) + (", ..." if len(task.labels) > 10 else "")
        target += f", {len(task.labels)} classes: {shown}"
    return [f"Task: {statement}", target + ")"]


def _feature_lines(task: PreparedTask, facts: list[_ColumnFacts],
                   with_target: bool = True) -> list[str]:
    numeric = sum(f.numeric for f in facts)
    out = [f"Features ({len(facts)}: {numeric} numeric, {len(facts) - numeric} other):"]
    listed = facts if len(facts) <= _PREVIEW_COLUMNS else facts[: _PREVIEW_COLUMNS - 1]
    for fact in listed:
        missing = f", {fact.missing_pct:.1f}% missing" if fact.missing_pct else ""
        out.append(
            _clip(f"- {fact.name}: {fact.dtype}{missing}, {fact.unique} distinct, {fact.detail}",
                  120)
        )
    if len(listed) < len(facts):
        out.append(f"- ... {len(facts) - len(listed)} more columns (see input/description.md)")
    rows = task.train.head(2) if with_target else task.train.head(2).drop(columns=[task.target])
    out.append("Sample rows of train.csv:" if with_target else "Sample rows (what df holds):")
    sample = rows.to_csv(index=False, lineterminator="\n").rstrip("\n")
    out += [_clip(line, _PREVIEW_LINE_CHARS) for line in sample.split("\n")[:3]]
    return out


def _num(value: Any) -> str:
    return f"{float(value):.6g}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
