"""What the engine remembers across runs, as pure data: a task's meta-features, the cases
(working model code of earlier tasks) and fixes (an error and the edit that cured it), and
retrieval: the nearest cases of a task, the nearest fix of an error. No I/O: the store is
engine/memory.py.

A case is retrieved for a task only from *other* tasks (another fingerprint): a task never
retrieves itself, so a benchmark that built its memory on the same datasets is
leave-one-task-out by construction, and nothing here ever reads a label of the task at hand
beyond its training rows' meta-features.

A retrieved case runs twice: as stored, by the floor with no LLM call (its code names none of
its task's columns, engine/memory.py, so it runs on this task's), and as the LLM's adaptation
(a recall step). The recall's reply runs as written; `replaced_model` says when it dropped
the case's model, which the prompt asks it to keep.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.metric import METRICS
from search.node import Node, Operator

# Meta-features, each mapped to a comparable scale (logs, shares) for the distance.
META_KEYS = ("log_rows", "log_columns", "numeric_share", "text_share", "missing_share",
             "log_classes", "minority_share", "target_skew")


@dataclass(frozen=True, slots=True)
class Case:
    """Working model code of an earlier task and how it did there."""

    case_id: str
    fingerprint: str  # of the task it came from (task_fingerprint)
    dataset: str  # a readable name of that task (its data file)
    task_type: str  # regression | binary | multiclass
    meta: Mapping[str, float]
    operator: str  # the node's operator (draft, improve, tune, ...)
    metric: str
    gain: float  # normalised gain over that run's baseline root: >0 beat it
    code: str  # the model part (imports, PARAMS, fit_predict)


@dataclass(frozen=True, slots=True)
class Fix:
    """An error a node died of, and the code of the debug step that cured it."""

    fix_id: str
    fingerprint: str
    error: str  # the failed node's one-line error
    failed: str  # its model code
    fixed: str  # the debug child's model code, which ran


def task_fingerprint(columns: Sequence[str], target: str) -> str:
    """Identifies a dataset across runs and machines by its feature columns and target, not
    its rows: a benchmark's split of a dataset is the same task as the whole file, and the
    same task never retrieves its own cases."""
    text = "\x1f".join([target, *sorted(map(str, columns))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def meta_features(train: pd.DataFrame, target: str, task_type: str) -> dict[str, float]:
    """The task's shape, from its training rows only: size, column types, missing share,
    class count and balance (classification) or skew (regression)."""
    features = train.drop(columns=[target])
    y = train[target]
    numeric = sum(pd.api.types.is_numeric_dtype(features[c]) for c in features.columns)
    columns = max(len(features.columns), 1)
    meta = {
        "log_rows": math.log10(max(len(train), 1)),
        "log_columns": math.log10(columns),
        "numeric_share": numeric / columns,
        "text_share": 1.0 - numeric / columns,
        "missing_share": float(features.isna().to_numpy().mean()) if features.size else 0.0,
        "log_classes": 0.0, "minority_share": 0.0, "target_skew": 0.0,
    }
    if task_type == "regression":
        values = pd.to_numeric(y, errors="coerce").dropna()
        skew = float(np.asarray(values.skew(), dtype=float)) if len(values) > 2 else 0.0
        meta["target_skew"] = float(np.tanh(skew / 3.0)) if math.isfinite(skew) else 0.0
    else:
        shares = y.value_counts(normalize=True)
        meta["log_classes"] = math.log10(max(len(shares), 1))
        meta["minority_share"] = float(shares.min()) if len(shares) else 0.0
    return meta


def distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    return math.sqrt(sum((float(a.get(k, 0.0)) - float(b.get(k, 0.0))) ** 2 for k in META_KEYS))


def compatible(case: Case, task_type: str, needs_proba: bool) -> bool:
    """A regression case serves regression; a classifier serves classification whose metric
    it can be scored by: code returning probabilities serves both kinds (for a label metric
    the harness takes the most probable class, operators/harness.py), code returning labels
    only a label metric."""
    if (case.task_type == "regression") != (task_type == "regression"):
        return False
    spec = METRICS.get(case.metric)
    return task_type == "regression" or (spec is not None and (spec.needs_proba
                                                               or not needs_proba))


def nearest_cases(meta: Mapping[str, float], fingerprint: str, task_type: str,
                  cases: Iterable[Case], k: int = 2, needs_proba: bool = False) -> list[Case]:
    """Up to `k` cases of other tasks of a compatible type, nearest task first; one per task
    (its best gain), and only code that beat its own baseline."""
    best: dict[str, Case] = {}
    for case in cases:
        if (case.fingerprint == fingerprint or not compatible(case, task_type, needs_proba)
                or case.gain <= 0):
            continue
        kept = best.get(case.fingerprint)
        if kept is None or case.gain > kept.gain:
            best[case.fingerprint] = case
    ranked = sorted(best.values(), key=lambda c: (distance(meta, c.meta), -c.gain, c.case_id))
    return ranked[:k]


_WORD = re.compile(r"[A-Za-z_]{3,}")


def error_words(error: str) -> set[str]:
    """The words of an error line, lower-cased (quoted names and numbers dropped: a column
    called 'price' in one task is 'age' in the next)."""
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", " ", error)
    return {w.lower() for w in _WORD.findall(unquoted)}


def nearest_fix(error: str, fingerprint: str, fixes: Iterable[Fix],
                threshold: float = 0.5) -> Fix | None:
    """The fix whose error is most like `error` (the same exception type, and at least
    `threshold` of their words shared, Jaccard), preferring other tasks' on a tie."""
    kind = error.split(":", 1)[0].strip()
    words = error_words(error)
    scored = []
    for fix in fixes:
        if fix.error.split(":", 1)[0].strip() != kind or not words:
            continue
        theirs = error_words(fix.error)
        overlap = len(words & theirs) / max(len(words | theirs), 1)
        if overlap >= threshold:
            scored.append((overlap, fix.fingerprint != fingerprint, fix.fix_id, fix))
    return max(scored, default=(None, None, None, None), key=lambda s: s[:3])[3]


def shortened(code: str, limit: int = 60) -> str:
    """At most `limit` lines of a case's code (the prompt stays short)."""
    lines = code.strip().splitlines()
    return "\n".join(lines[:limit] + (["# ..."] if len(lines) > limit else []))


# Where a case's model comes from: a class called in its code, imported from one of these.
MODEL_LIBRARIES = frozenset({"sklearn", "lightgbm", "xgboost", "catboost"})
AS_STORED = "the recalled case as stored"  # the plan of a case node starts so


def as_stored(node: Node) -> bool:
    """A retrieved case run as stored: engine-run, not LLM-written. A case node
    (search/floor.py); in runs made before case nodes existed, a recall node whose reply had
    been set aside for the case's own code (benchmarks/results/memory-2026-11-26c)."""
    return node.operator in (Operator.CASE, Operator.RECALL) and node.plan.startswith(AS_STORED)


def model_classes(code: str) -> frozenset[str]:
    """The classes of the model libraries that `code` calls (`ExtraTreesClassifier(...)`,
    `lgb.LGBMRegressor(...)`): its model and the steps of its pipeline. Empty for code that
    does not parse."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return frozenset()
    imported: set[str] = set()  # class names from `from sklearn.x import Name`
    modules: set[str] = set()  # aliases from `import lightgbm as lgb`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in MODEL_LIBRARIES:
                imported.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names
                           if a.name.split(".")[0] in MODEL_LIBRARIES)
    called: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in imported:
            called.add(func.id)
        elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
              and func.value.id in modules):
            called.add(func.attr)
    return frozenset(c for c in called if c[:1].isupper())


def replaced_model(case_code: str, code: str) -> str:
    """The case's model classes that `code`, a recall reply, no longer calls ("" when it
    calls them all): a small model replaces the case's model although asked to keep it, and
    scores worse (measured: benchmarks/results/memory-2026-11-26b)."""
    lost = sorted(model_classes(case_code) - model_classes(code))
    if not lost:
        return ""
    new = sorted(model_classes(code) - model_classes(case_code))
    return (f"the reply replaced its {', '.join(lost)}"
            + (f" with {', '.join(new)}" if new else ""))
