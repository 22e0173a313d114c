"""Plain-language tasks, the LLM's part: asked, constrained to JSON, only for what the words
leave open (engine/task/request.py `parse_request`), every answer checked against the data.
`resolve_request` is the entry point: the words first, then this.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from common.chat import ChatPrompt, Reply
from common.errors import UserError
from common.metric import METRICS
from engine.task.checks import MAX_DATA_BYTES, resolve_metric, stated_task_type
from engine.task.request import (
    MAX_CANDIDATES,
    MAX_PROMPT_COLUMNS,
    Request,
    check_metric_type,
    lookup_column,
    parse_request,
    with_target_from_words,
)


class RequestLLM(Protocol):
    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]: ...


SYSTEM = ("You read a request for a machine learning task on a CSV file and answer with one "
          "JSON object, nothing else. Use only names that appear in the lists you are given.")


def llm_prompt(request: Request, ask: list[str], files: list[str]) -> ChatPrompt:
    """A JSON-constrained question for the fields in `ask` ("data", "target", "metric")."""
    lines = [f"Request: {request.text}"]
    properties: dict[str, Any] = {}
    choices: list[str] = []
    if "data" in ask:
        lines.append("CSV files: " + ", ".join(files))
        lines.append('"data": the CSV file the request is about (one of the CSV files).')
        properties["data"] = {"type": "string", "enum": files}
        choices = files
    if "target" in ask:
        shown = list(request.columns[:MAX_PROMPT_COLUMNS])
        lines.append("Columns: " + ", ".join(shown))
        if request.target_phrase:
            lines.append(f"The request says to predict: {request.target_phrase}")
        lines.append('"target": the column to predict (one of the columns).')
        properties["target"] = {"type": "string", "enum": shown}
        choices = shown
    if "metric" in ask:
        names = sorted(METRICS)
        lines.append('"metric": the metric the request wants, one of ' + ", ".join(names)
                     + ', or "" if none of them fits.')
        properties["metric"] = {"type": "string", "enum": [*names, ""]}
    if "data" in ask or "target" in ask:
        lines.append('"sure": true only if the request makes the answer clear; '
                     '"alternatives": the other plausible answers (empty when sure).')
        properties["sure"] = {"type": "boolean"}
        properties["alternatives"] = {"type": "array", "items": {"type": "string",
                                                                 "enum": choices}}
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    lines.append("Answer with JSON with the keys: " + ", ".join(properties) + ".")
    return ChatPrompt(
        messages=[{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": "\n".join(lines)}],
        max_tokens=200, temperature=0.0, seed=0, tag="request", json_schema=schema,
    )


def parse_json_reply(text: str) -> dict[str, Any]:
    """The JSON object of a reply (fences and chatter around it are dropped)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    data = json.loads(text[start: end + 1], strict=False)
    if not isinstance(data, dict):
        raise ValueError("the reply is not a JSON object")
    return data


def candidate_files(cwd: Path) -> list[str]:
    """CSV files the data may be: in the working directory and one folder below, as relative
    paths (sorted, at most MAX_CANDIDATES)."""
    found = sorted({*cwd.glob("*.csv"), *cwd.glob("*/*.csv")})
    found = [p for p in found if p.is_file() and p.stat().st_size <= MAX_DATA_BYTES]
    return [str(p.relative_to(cwd)) for p in found[:MAX_CANDIDATES]]


def resolve_request(text: str, *, cwd: Path | None = None,
                    flags: Mapping[str, Any] | None = None,
                    llm: Callable[[], RequestLLM] | None = None) -> Request:
    """Parse `text`, let explicit flags (data, target, test, metric) win, ask `llm()` (made
    only when needed) for what is missing, and check the result against the data."""
    cwd = cwd or Path.cwd()
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    request = parse_request(text, cwd)
    given: dict[str, Any] = {k: Path(flags[k]) if k in ("data", "test") else flags[k]
                             for k in ("data", "test", "target", "metric") if k in flags}
    if given:
        sources = {**request.sources, **{k: "flag" for k in given}}
        request = replace(request, sources=sources, **given)
        if "metric" in given:
            request = replace(request, metric_wanted=False)
        if request.data is not None and ("data" in given or not request.columns):
            request = with_target_from_words(request)
    asker = _Asker(llm)
    try:
        if request.data is None:
            files = candidate_files(cwd)
            if not files:
                raise UserError("the request names no CSV file and there is none in "
                                f"{cwd}; name it, e.g. 'predict churn from data/telco.csv', "
                                "or pass --data")
            answer = asker.ask(request, ["data"], files)
            chosen = _choice(answer, "data", files, "data file")
            request = with_target_from_words(replace(
                request, data=(cwd / chosen).resolve(),
                sources={**request.sources, "data": "LLM"}))
        ask = [name for name in request.missing() if name != "data"]
        if ask:
            answer = asker.ask(request, ask, [])
            if "target" in ask:
                column = _choice(answer, "target", list(request.columns), "target column")
                request = replace(request, target=column,
                                  sources={**request.sources, "target": "LLM"})
            if "metric" in ask:
                request = _llm_metric(request, answer)
    finally:
        asker.close()
    return check_against_data(request)


class _Asker:
    """Makes the LLM on first use, keeps it for a second question, closes it at the end."""

    def __init__(self, factory: Callable[[], RequestLLM] | None) -> None:
        self.factory = factory
        self.llm: RequestLLM | None = None

    def ask(self, request: Request, fields: list[str], files: list[str]) -> dict[str, Any]:
        if self.factory is None:
            raise UserError(f"the request does not say the {' and '.join(fields)}; say it in "
                            "the request (e.g. 'predict COLUMN from FILE.csv') or pass flags")
        if self.llm is None:
            self.llm = self.factory()
        prompt = llm_prompt(request, fields, files)
        reply = self.llm.generate([prompt])[0].text
        try:
            return parse_json_reply(reply)
        except ValueError as exc:
            raise UserError(f"could not read the LLM's answer about the {', '.join(fields)} "
                            f"({exc}): {reply[:120]!r}; say it in the request instead") from exc

    def close(self) -> None:
        close = getattr(self.llm, "close", None)
        if callable(close):
            close()


def _choice(answer: dict[str, Any], key: str, options: list[str], what: str) -> str:
    """The LLM's pick for `key`, which must be one of `options`; unsure is an error."""
    picked = str(answer.get(key) or "").strip()
    alternatives = [str(a).strip() for a in answer.get("alternatives") or [] if str(a).strip()]
    if key == "target":
        match = lookup_column(picked, tuple(options)) if picked else None
        others = [c for a in alternatives
                  if (c := lookup_column(a, tuple(options))) is not None and c != match]
    else:
        match = picked if picked in options else None
        others = [a for a in alternatives if a in options and a != match]
    if match is None:
        shown = ", ".join(options[:12]) + (", ..." if len(options) > 12 else "")
        raise UserError(f"the request does not say which {what} to use and the LLM named none "
                        f"of them ({picked!r}); name it in the request, e.g. one of: {shown}")
    sure = answer.get("sure", True)
    if others or sure is False or str(sure).lower() == "false":
        choices = ", ".join(dict.fromkeys([match, *others]))
        flag = "--target" if key == "target" else "--data"
        raise UserError(f"the request is ambiguous about the {what}: it could be {choices}; "
                        f"name one in the request (or pass {flag})")
    return match


def _llm_metric(request: Request, answer: dict[str, Any]) -> Request:
    name = str(answer.get("metric") or "").strip().lower()
    if name not in METRICS:
        return request  # the task type's default metric
    if request.task_type is not None:
        check_metric_type(name, request.task_type)
    return replace(request, metric=name, sources={**request.sources, "metric": "LLM"})


def check_against_data(request: Request) -> Request:
    """The target's task type (stated or inferred) against the metric: a mismatch is a
    UserError naming the metrics that fit. F1 on a multiclass target means weighted F1."""
    assert request.data is not None and request.target is not None
    if request.target not in request.columns:
        shown = ", ".join(request.columns[:20])
        raise UserError(f"target `{request.target}` is not a column of {request.data}; "
                        f"columns: {shown}")
    try:
        column = pd.read_csv(request.data, usecols=[request.target], encoding="utf-8-sig",
                             low_memory=False)[request.target]
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        raise UserError(f"cannot read column `{request.target}` of {request.data}: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                        ) from exc
    task_type = stated_task_type(request.task_type, column.dropna(), request.target)
    metric = request.metric
    if metric == "f1" and task_type == "multiclass":
        metric = "f1_weighted"
        note = request.sources.get("metric", "request")
        request = replace(request, sources={**request.sources,
                                            "metric": f"{note}; multiclass, so weighted F1"})
    resolve_metric(metric, task_type)
    return replace(request, metric=metric, kind=task_type)
