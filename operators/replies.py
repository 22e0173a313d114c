"""Reply parsing: from a model's raw text to a plan and runnable code, a list of ideas, or a
reflection. Model code defining `fit_predict` is wrapped in the harness; a whole script that
writes the submission itself is kept as it is.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from operators.context import TaskContext
from operators.harness import assemble, model_part
from operators.imports import fix_imports

MAX_INSIGHTS = 10
_INSIGHT_CHARS = 240


@dataclass(frozen=True, slots=True)
class Parsed:
    plan: str
    code: str
    problem: str  # empty when the code parses; else why not, for the repair prompt


FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
FENCED = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)


def parse_reply(text: str, ctx: TaskContext) -> Parsed:
    """Split a reply into plan and runnable code; the longest fenced block is the code.

    Model code defining `fit_predict` is wrapped in the harness; a whole script that writes
    the submission itself is kept as it is.
    """
    blocks = [b for b in FENCE.findall(text) if b.strip()]
    if blocks:
        code = max(blocks, key=len)
        plan = text[: text.find("```")].strip()
    else:
        code, plan = text, ""
    code = model_part(code.strip() + "\n")
    plan = one_line(plan, 400)
    if not code.strip():
        return Parsed(plan, "", "Your reply contained no code.")
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        problem = f"Your code does not parse: SyntaxError: {exc.msg}{where}."
        return Parsed(plan, assemble(ctx, code) if blocks else "", problem)
    code = fix_imports(code)
    defines = any(isinstance(n, ast.FunctionDef) and n.name == "fit_predict" for n in tree.body)
    if defines:
        return Parsed(plan, assemble(ctx, code), "")
    if "submission/" in code:
        return Parsed(plan, code, "")
    return Parsed(plan, "", "Your code does not define fit_predict(X, y, X_valid, X_test).")


@dataclass(frozen=True, slots=True)
class ParsedInsights:
    insights: tuple[str, ...]
    problem: str  # empty when at least one idea was found


_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(.+?)\s*$", re.MULTILINE)
_TEXT_KEYS = ("insight", "idea", "analysis", "text", "description")


def parse_insights(text: str) -> ParsedInsights:
    """The ideas of an insights reply: a JSON list (in a fence or bare; of strings, or of
    objects holding one), a JSON object holding such a list, or else bulleted lines.
    Whitespace is flattened, repeats dropped, at most MAX_INSIGHTS kept in reply order."""
    found: list[str] = []
    for candidate in _json_candidates(text):
        try:
            data = json.loads(candidate, strict=False)
        except ValueError:
            continue
        found = _insight_items(data)
        if found:
            break
    if not found:
        found = _BULLET.findall(text)
    kept: list[str] = []
    seen: set[str] = set()
    for item in found:
        idea = one_line(str(item).strip().strip("\"'"), _INSIGHT_CHARS)
        if idea and idea.lower() not in seen:
            seen.add(idea.lower())
            kept.append(idea)
    if not kept:
        return ParsedInsights((), "Your reply contained no list of ideas.")
    return ParsedInsights(tuple(kept[:MAX_INSIGHTS]), "")



def _json_candidates(text: str) -> list[str]:
    fenced = re.findall(r"```[a-zA-Z]*[ \t]*\n(.*?)```", text, re.DOTALL)
    spans = [text[a:b + 1] for a, b in ((text.find("["), text.rfind("]")),
                                        (text.find("{"), text.rfind("}"))) if 0 <= a < b]
    return [*fenced, *spans, text]


def _insight_items(data: object) -> list[str]:
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        return _insight_items(lists[0]) if lists else []
    if not isinstance(data, list):
        return []
    items = []
    for item in data:
        if isinstance(item, str):
            items.append(item)
        elif isinstance(item, dict):
            texts = [item[k] for k in _TEXT_KEYS if isinstance(item.get(k), str)]
            texts = texts or [v for v in item.values() if isinstance(v, str)]
            if texts:
                items.append(texts[0])
    return items



def clean_reflection(text: str) -> str:
    """A reflection as one short paragraph: code blocks dropped (a small model writes them
    anyway), whitespace collapsed, at most 600 characters."""
    return one_line(FENCED.sub(" ", text), 600)



_SELF_REPORTED = re.compile(
    r"(?i)\b(?:valid\w*|val|rmse|f1\w*|accuracy|auc|score)\b[^\n0-9-]{0,20}(-?\d+(?:\.\d+)?)"
)


def self_reported_metric(stdout: str) -> float | None:
    """The last number a script printed next to a metric-like word; recorded, never trusted."""
    matches = _SELF_REPORTED.findall(stdout)
    return float(matches[-1]) if matches else None


def one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def tail_lines(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])

