"""Plain-language tasks: `--task "predict churn from data/telco.csv, maximise AUC"` -> a task.

Structure-based prompt parsing in the spirit of AutoML-Agent (seed 004), deterministic first:
`parse_request` finds what words can say for sure (a CSV path that exists, the target column,
the metric, the optimisation direction, the task type, constraints such as "under 5 ms per
row"), reading only the CSV's header. `resolve_request` (engine/task/request_llm.py) asks an LLM,
constrained to JSON, only for what is still missing (the data file, the target, a metric the
words name but we do not know), checks every answer against the data, and refuses to guess:
two plausible targets, or an LLM that is not sure, is a `UserError` that lists the choices. With
everything found by the words, no LLM is made at all.

The spec is shown before the run and written as `task.yaml` into the run directory, so it can
be edited and run again with `--task runs/<id>/task.yaml`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from common.errors import UserError
from common.metric import METRICS
from engine.config import parse_budget

# Metric phrases, most specific first: a later pattern inside an earlier match is not counted.
_METRIC_WORDS: tuple[tuple[str, str], ...] = (
    (r"weighted[\s_-]*f[\s_-]?1(?:[\s-]*score)?|f[\s_-]?1[\s_-]*weighted", "f1_weighted"),
    (r"roc[\s_-]*auc|auc[\s_-]*roc|\bauc\b|area under (?:the )?(?:roc )?curve", "roc_auc"),
    (r"log[\s_-]*loss|logloss|cross[\s-]*entropy", "log_loss"),
    (r"\brmse\b|root[\s-]+mean[\s-]+squared?[\s-]+error", "rmse"),
    # MSE ranks models exactly as RMSE does, and RMSE is what the scorer computes.
    (r"\bmse\b|mean[\s-]+squared?[\s-]+error", "rmse"),
    (r"\bmae\b|mean[\s-]+absolute[\s-]+error", "mae"),
    (r"\br2\b|\br\^2\b|\br²|r[\s-]+squared|coefficient of determination", "r2"),
    (r"\bf[\s_-]?1\b(?:[\s-]*score)?|\bf[\s-]?score\b", "f1"),
    (r"\baccuracy\b", "accuracy"),
)
_MAXIMISE = r"maximi[sz]e|maximi[sz]ing|maximum|highest|higher|increase|best"
_MINIMISE = r"minimi[sz]e|minimi[sz]ing|minimum|lowest|lower|reduce|smallest"
# Words that say a metric is wanted; with no known metric among them the LLM is asked.
_OPTIMISE = re.compile(r"\b(?:maximi[sz]e|minimi[sz]e|optimi[sz]e|metric|scored? (?:by|on|with)|"
                       r"measured by|evaluated (?:by|on|with))\b", re.I)
_CLASSIFY = re.compile(r"\b(?:classif(?:y|ies|ied|ying|ication|ier)|categori[sz]e|binary|"
                       r"multi-?class)\b", re.I)
_REGRESS = re.compile(r"\bregress(?:ion|or|ing|es)?\b", re.I)

_VERB = re.compile(r"\b(?:predict(?:s|ed|ing)?|forecast(?:s|ing)?|estimat(?:e|es|ing)|"
                   r"classify(?:ing)?|regress(?:ing)?|model(?:l?ing)?)\b\s+(?:whether\s+)?", re.I)
_INTRO = re.compile(r"\b(?:target|label|outcome)\b(?:\s+column)?(?:\s+(?:is|should be)|\s*[:=])?"
                    r"\s*|\bcolumn\s+to\s+predict(?:\s+is|\s*[:=])?\s*", re.I)
_OUTRO = re.compile(r"((?:\S+\s+){0,3}\S+)\s+(?:is|as)\s+(?:the\s+|our\s+|my\s+)?"
                    r"(?:target|label)\b", re.I)
_NOUN = re.compile(r"((?:\S+\s+){0,2}\S+)\s+(?:prediction|forecast(?:ing)?|estimation)\b", re.I)
# Where a target phrase ends: a preposition that starts the data or the goal, or punctuation.
_STOP = re.compile(r"\s(?:from|in|on|using|with|given|based|for|by|via|where|while|within|"
                   r"under|below|at|across|so|maximi[sz]\w*|minimi[sz]\w*|optimi[sz]\w*|"
                   r"train\w*)\b|[,;:!?()]|\.(?:\s|$)|\.csv\b|$", re.I)
_QUOTED = re.compile(r"[\"'`“”‘’]([^\"'`“”‘’]{1,120})[\"'`“”‘’]")
_QUOTED_CSV = re.compile(r"[\"'`]([^\"'`]+?\.csv)[\"'`]", re.I)
_TEST_BEFORE = re.compile(r"\btest(?:ing|ed)?\b(?:\s+(?:it|on|with|set|file|data|split|rows|"
                          r"against))*\s*[:=]?\s*$", re.I)
_CSV_TOKEN = re.compile(r"[^\s,;:()\[\]\"'`]+\.csv\b", re.I)

_NUMBER = r"(\d+(?:\.\d+)?)"
_BELOW = (r"(?:under|below|less than|smaller than|lighter than|at most|up to|within|"
          r"no more than|max(?:imum)?(?: of)?|<=?|≤)")
_LATENCY = re.compile(
    rf"(?:{_BELOW}\s*)?{_NUMBER}\s*(ms|milliseconds?|us|µs|microseconds?|s|secs?|seconds?)\s*"
    r"(?:(?:per|a|an|each|for each|for one)\s+|/\s*)"
    r"(?:row|prediction|sample|record|example|instance|request|input)s?\b", re.I)
_SIZE = re.compile(
    rf"(?:model|size|file|footprint)[^.,;]*?{_BELOW}\s*{_NUMBER}\s*"
    r"(kb|kib|mb|mib|gb|gib|kilobytes?|megabytes?|gigabytes?)\b"
    rf"|{_BELOW}\s*{_NUMBER}\s*(kb|kib|mb|mib|gb|gib|kilobytes?|megabytes?|gigabytes?)\b",
    re.I)
_TRAIN_TIME = re.compile(
    rf"\b(?:train\w*|fit\w*)\b[^.,;]*?{_BELOW}\s*{_NUMBER}\s*"
    r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)\b", re.I)
_MS = {"ms": 1.0, "millisecond": 1.0, "us": 1e-3, "µs": 1e-3, "microsecond": 1e-3,
       "s": 1000.0, "sec": 1000.0, "second": 1000.0}
# MB means 2**20 bytes here, as model_mb does: the difference to 10**6 is not worth a surprise.
_MB = {"kb": 1 / 1024, "kib": 1 / 1024, "kilobyte": 1 / 1024, "mb": 1.0, "mib": 1.0,
       "megabyte": 1.0, "gb": 1024.0, "gib": 1024.0, "gigabyte": 1024.0}
_TIME_UNIT = {"ms": "ms", "millisecond": "ms", "s": "s", "sec": "s", "second": "s", "m": "m",
              "min": "m", "minute": "m", "h": "h", "hr": "h", "hour": "h"}

# How many CSV files (found near the working directory) the LLM may choose the data from.
MAX_CANDIDATES = 40
MAX_PROMPT_COLUMNS = 200


@dataclass(frozen=True)
class Request:
    """What a plain-language request says, and where each field came from."""

    text: str
    data: Path | None = None
    test: Path | None = None
    target: str | None = None
    metric: str | None = None
    task_type: str | None = None  # "classification" | "regression"
    constraints: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # field -> how it was found
    columns: tuple[str, ...] = ()  # the data file's header, once the data is known
    metric_wanted: bool = False  # optimisation words without a metric we know
    target_phrase: str = ""  # what the words say about the target when no column matched
    kind: str = ""  # binary | multiclass | regression, once checked against the data

    def missing(self) -> list[str]:
        """Fields to ask the LLM for."""
        out = [name for name in ("data", "target") if getattr(self, name) is None]
        if self.metric is None and self.metric_wanted:
            out.append("metric")
        return out

    def config_values(self) -> dict[str, Any]:
        """The RunConfig fields this request sets."""
        values: dict[str, Any] = {"data": self.data, "target": self.target,
                                  "test": self.test, "metric": self.metric,
                                  "task_type": self.task_type, "description": self.text}
        values.update(self.constraints)
        return {k: v for k, v in values.items() if v is not None}

    def describe(self) -> str:
        """The spec as a person reads it before the run starts."""
        rows = [("data", self.data), ("test", self.test), ("target", self.target),
                ("metric", self.metric or "default of the task type"),
                ("task type", self.kind or self.task_type)]
        lines = ["task from the request:"]
        for name, shown in rows:
            if shown is None:
                continue
            source = self.sources.get(name.replace(" ", "_"))
            if name == "task type" and source is None:
                source = "inferred from the target"
            lines.append(f"  {name}: {shown}" + (f"   ({source})" if source else ""))
        for key, limit in self.constraints.items():
            lines.append(f"  {key}: {limit:g}   ({self.sources.get(key, 'request')})")
        return "\n".join(lines)


# --- deterministic parsing --------------------------------------------------------------------


def parse_request(text: str, cwd: Path | None = None) -> Request:
    """Everything the words settle, checked against the CSV's header; UserError on a
    contradiction (two metrics, two targets, a CSV that does not exist, ...)."""
    cwd = cwd or Path.cwd()
    text = " ".join(text.split())
    if not text:
        raise UserError("empty --task; describe the task, e.g. --task \"predict churn from "
                        "data/telco.csv\", or pass a task.yaml")
    sources: dict[str, str] = {}
    data, test = _find_data(text, cwd, sources)
    metric = _find_metric(text, sources)
    task_type = _find_task_type(text, sources)
    if metric is not None and task_type is not None:
        check_metric_type(metric, task_type)
    constraints = _find_constraints(text, sources)
    request = Request(text=text, data=data, test=test, metric=metric, task_type=task_type,
                      constraints=constraints, sources=sources,
                      metric_wanted=metric is None and bool(_OPTIMISE.search(text)))
    if data is not None:
        request = with_target_from_words(request)
    return request


def with_target_from_words(request: Request) -> Request:
    """Read the data file's header and find the target the words name (if they name one)."""
    assert request.data is not None
    columns = read_columns(request.data)
    request = replace(request, columns=columns)
    if request.target is not None:
        return request
    found, phrase = _find_target(request.text, columns)
    if found is None:
        return replace(request, target_phrase=phrase)
    column, words = found
    return replace(request, target=column,
                   sources={**request.sources, "target": f"request: {words!r}"})


def read_columns(path: Path) -> tuple[str, ...]:
    try:
        header = pd.read_csv(path, nrows=0, encoding="utf-8-sig")
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot read the header of data file {path}: {first}") from exc
    return tuple(str(c) for c in header.columns)


def _find_data(text: str, cwd: Path, sources: dict[str, str]) -> tuple[Path | None, Path | None]:
    spans: list[tuple[int, str]] = []
    for match in _QUOTED_CSV.finditer(text):
        spans.append((match.start(1), match.group(1)))
    quoted = [(m.start(), m.end()) for m in _QUOTED_CSV.finditer(text)]
    for match in _CSV_TOKEN.finditer(text):
        if not any(a <= match.start() < b for a, b in quoted):
            spans.append((match.start(), match.group(0)))
    if not spans:
        return None, None
    found: dict[Path, tuple[int, str]] = {}
    for start, written in sorted(spans):
        path = Path(written).expanduser()
        path = path if path.is_absolute() else cwd / path
        if not path.is_file():
            raise UserError(f"the request names {written}, which is not a file (working dir "
                            f"{cwd}); fix the path")
        found.setdefault(path.resolve(), (start, written))
    tests = [p for p, (start, _) in found.items() if _TEST_BEFORE.search(text[:start])]
    datas = [p for p in found if p not in tests]
    if len(datas) > 1 or len(tests) > 1:
        named = ", ".join(found[p][1] for p in found)
        raise UserError(f"the request names several CSV files ({named}); name one data file "
                        "(and say 'test on FILE.csv' for a test file), or pass --data")
    if not datas:
        raise UserError("the request names only a test file; name the training data too, e.g. "
                        "'predict y from train.csv, test on test.csv'")
    data = datas[0]
    sources["data"] = f"request: {found[data][1]!r}"
    test = tests[0] if tests else None
    if test is not None:
        sources["test"] = f"request: {found[test][1]!r}"
    return data, test


def _find_metric(text: str, sources: dict[str, str]) -> str | None:
    taken: list[tuple[int, int]] = []
    named: dict[str, tuple[int, str]] = {}
    for pattern, metric in _METRIC_WORDS:
        for match in re.finditer(pattern, text, re.I):
            if any(a <= match.start() < b for a, b in taken):
                continue
            taken.append(match.span())
            named.setdefault(metric, (match.start(), match.group(0)))
    if not named:
        return None
    if len(named) > 1:
        words = ", ".join(f"{w!r} ({m})" for m, (_, w) in sorted(named.items(),
                                                                 key=lambda kv: kv[1][0]))
        raise UserError(f"the request names several metrics: {words}; keep one")
    metric, (start, words) = next(iter(named.items()))
    before = " ".join(text[:start].split()[-4:])
    maximise = re.search(rf"\b(?:{_MAXIMISE})\b", before, re.I)
    minimise = re.search(rf"\b(?:{_MINIMISE})\b", before, re.I)
    spec = METRICS[metric]
    if (maximise and not spec.maximize) or (minimise and spec.maximize):
        said = (maximise or minimise).group(0)  # type: ignore[union-attr]
        goal = "higher" if spec.maximize else "lower"
        raise UserError(f"the request says {said!r} {words}, but {goal} {metric} is better; "
                        f"say '{'maximise' if spec.maximize else 'minimise'} {words}'")
    sources["metric"] = f"request: {words!r}"
    return metric


def _find_task_type(text: str, sources: dict[str, str]) -> str | None:
    classify, regress = _CLASSIFY.search(text), _REGRESS.search(text)
    if classify and regress:
        raise UserError(f"the request asks for both classification ({classify.group(0)!r}) "
                        f"and regression ({regress.group(0)!r}); keep one")
    if classify:
        sources["task_type"] = f"request: {classify.group(0)!r}"
        return "classification"
    if regress:
        sources["task_type"] = f"request: {regress.group(0)!r}"
        return "regression"
    return None


def check_metric_type(metric: str, task_type: str) -> None:
    spec = METRICS[metric]
    kinds = ("binary", "multiclass") if task_type == "classification" else ("regression",)
    if not set(kinds) & set(spec.task_types):
        fitting = [m for m, s in METRICS.items() if set(kinds) & set(s.task_types)]
        raise UserError(f"the request asks for {task_type} but metric {metric} is for "
                        f"{' or '.join(spec.task_types)} tasks; use one of {', '.join(fitting)}")


def _find_constraints(text: str, sources: dict[str, str]) -> dict[str, float]:
    found: dict[str, float] = {}
    latency = _LATENCY.search(text)
    if latency:
        unit = _singular(latency.group(2).lower())
        found["max_predict_ms_per_row"] = float(latency.group(1)) * _MS[unit]
        sources["max_predict_ms_per_row"] = f"request: {latency.group(0)!r}"
    size = _SIZE.search(text)
    if size:
        number = size.group(1) or size.group(3)
        unit = _singular((size.group(2) or size.group(4)).lower())
        found["max_model_mb"] = round(float(number) * _MB[unit], 6)
        sources["max_model_mb"] = f"request: {size.group(0)!r}"
    train = _TRAIN_TIME.search(text)
    if train and (latency is None or train.end() <= latency.start()
                  or train.start() >= latency.end()):
        unit = _TIME_UNIT[_singular(train.group(2).lower())]
        if unit == "ms":
            seconds = float(train.group(1)) / 1000.0
        else:
            seconds = parse_budget(f"{train.group(1)}{unit}")
        found["max_train_seconds"] = seconds
        sources["max_train_seconds"] = f"request: {train.group(0)!r}"
    return found


def _singular(unit: str) -> str:
    return unit[:-1] if unit.endswith("s") and len(unit) > 2 else unit


# --- the target -------------------------------------------------------------------------------


def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", text.lower())


def _variants(words: str) -> list[str]:
    """A phrase and its singular forms, normalised: 'House Prices' -> housesprices, ..."""
    base = _norm(words)
    out = [base]
    for suffix, repl in (("ies", "y"), ("es", ""), ("s", "")):
        if base.endswith(suffix) and len(base) > len(suffix) + 2:
            out.append(base[: -len(suffix)] + repl)
    return out


def lookup_column(words: str, columns: tuple[str, ...]) -> str | None:
    """The column `words` names: exactly, ignoring case and separators, or in the singular."""
    if words in columns:
        return words
    by_norm: dict[str, list[str]] = {}
    for column in columns:
        by_norm.setdefault(_norm(column), []).append(column)
    for variant in _variants(words):
        hits = by_norm.get(variant, [])
        if len(hits) == 1:
            return hits[0]
    return None


def _columns_in(phrase: str, columns: tuple[str, ...]) -> list[tuple[str, str]]:
    """Columns named by the longest word spans of `phrase`, left to right, as (column, words)."""
    words = phrase.split()
    found: list[tuple[int, int, str, str]] = []
    for size in range(min(len(words), 6), 0, -1):
        for i in range(len(words) - size + 1):
            if any(a < i + size and i < b for a, b, _, _ in found):
                continue  # inside a longer match: "monthly charges" wins over "charges"
            span = " ".join(words[i: i + size]).strip("\"'`“”‘’.")
            column = lookup_column(span, columns)
            if column is not None and (span == column or span.lower() not in _FILLER):
                found.append((i, i + size, column, span))
    found.sort()
    out: list[tuple[str, str]] = []
    for _, _, column, span in found:
        if column not in [c for c, _ in out]:
            out.append((column, span))
    return out


_FILLER = frozenset({"the", "a", "an", "whether", "which", "column", "value", "values", "of",
                     "and", "or", "if"})


def _find_target(text: str, columns: tuple[str, ...]) -> tuple[tuple[str, str] | None, str]:
    """((column, the words that named it) or None, the target phrase the words gave)."""
    phrases = []
    for match in [*_VERB.finditer(text), *_INTRO.finditer(text)]:
        rest = text[match.end():]
        stop = _STOP.search(rest)
        phrases.append(rest[: stop.start() if stop else len(rest)].strip())
    for match in [*_OUTRO.finditer(text), *_NOUN.finditer(text)]:
        phrases.append(match.group(1))
    named: list[tuple[str, str]] = []
    for phrase in phrases:
        for column, words in _columns_in(phrase, columns):
            if column not in [c for c, _ in named]:
                named.append((column, words))
    if not named:
        quoted = [(c, q) for q in _QUOTED.findall(text)
                  if (c := lookup_column(q.strip(), columns)) is not None]
        named = list(dict(quoted).items())
    if len(named) > 1:
        choices = ", ".join(f"`{c}`" for c, _ in named)
        raise UserError(f"the request names several columns that could be the target: "
                        f"{choices}; say which one to predict, e.g. 'predict {named[0][0]}' "
                        "(or pass --target)")
    phrase = next((p for p in phrases if p), "")
    return (named[0] if named else None), phrase
