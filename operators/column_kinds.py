"""What only a language model knows about a text column: its kind, asked as constrained JSON,
checked by the engine and turned into a feature program (issue 74, item 3).

A 1.5B model writes a useful `add_features` rarely, but it knows that "<0, 0<=X<200, >=200"
or "Ex, Gd, TA, Fa, Po" is a scale, and in which order; no rule list knows every scale. So for
a text column the model is asked one narrow question: which kind of column is it (ordered
levels with their order, a date or time, a number held as text, an identifier, free text, a
plain category)? The reply is held to a JSON schema (llama.cpp decodes by its grammar; the
levels are the only words an order may use), and the engine checks it against the training
rows before anything runs:

- an order names exactly the column's levels as the rows spell them, each once;
- a date parses with pandas on most of the column's values (each holding a digit: a word
  such as "may" parses too, filled in with today's date);
- a number held as text converts with `pd.to_numeric` on most values once common symbols
  (currency, percent, thousands separators, spaces) are stripped.

A useful answer becomes one feature program (`ordered_program`, `date_program`,
`number_program`), which then goes through the same path as any other (its text checks, its
run, its gate, kept or not, counted in the summary: operators/kinds/features.py). An answer
that gives no program (an identifier, free text, a plain category) or fails its check is
refused with a line that says so; the node keeps the reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from common.chat import ChatPrompt
from operators.context import ColumnLevels, TaskContext
from operators.feature_checks import FUNCTION
from search.programs import REJECTED

TAG = "columns"  # the prompt's tag: a scripted LLM answers it under this key
# The kinds an answer may name, and how a refusal or a plan says each.
KINDS = {
    "ordered": "ordered levels",
    "date": "a date or time",
    "number": "a number held as text",
    "identifier": "an identifier",
    "text": "free text",
    "category": "a plain category",
}
GIVES_PROGRAM = ("ordered", "date", "number")
MIN_LEVELS, MAX_LEVELS = 3, 30  # a column worth an order question; the levels a prompt shows
# "Most" of a column's values, for a date or a number held as text: a few stray entries
# ("unknown", "n/a") do not make a date column something else.
MOST = 0.9
# The questions one run asks. Each is a feature program, and every program not kept counts
# toward the LLM's patience (search.programs.PATIENCE, 10 in a row): credit-g has 11 text
# columns of 3 to 30 levels, and asking them all would retire the LLM before it wrote one
# program of its own.
MAX_QUESTIONS = 4
# What a number held as text may carry around its digits: currency, percent, thousands
# separators, spaces.
SYMBOLS = r"[\s$€£¥%,]"
SYSTEM = "You describe the columns of a table. Answer with one JSON object, nothing else."


# ---- the levels, from the training rows --------------------------------------------------


def column_levels(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[ColumnLevels, ...]:
    """Each of `columns`' levels in `frame` (the training rows): the most frequent
    MAX_LEVELS with their counts, and how many there are; missing values are no level."""
    out = []
    for column in columns:
        counts = frame[column].dropna().astype(str).value_counts(sort=True)
        shown = tuple((str(level), int(n)) for level, n in counts.head(MAX_LEVELS).items())
        out.append(ColumnLevels(str(column), shown, len(counts)))
    return tuple(out)


def _share(levels: ColumnLevels, parsed: Sequence[bool]) -> float:
    """The share of the column's values (each level weighted by its count) that `parsed`
    marks."""
    total = sum(n for _, n in levels.counts)
    return sum(n for (_, n), ok in zip(levels.counts, parsed, strict=True) if ok) / total \
        if total else 0.0


def date_share(levels: ColumnLevels) -> float:
    """The share of the column's values (of those `levels` holds) that are dates: pandas
    parses them and they hold a digit."""
    values = pd.Series(list(levels.levels), dtype=object)
    parsed = pd.to_datetime(values, errors="coerce", utc=True, format="mixed")
    return _share(levels, [not pd.isna(when) and bool(re.search(r"\d", value))
                           for value, when in zip(levels.levels, parsed, strict=True)])


def number_share(levels: ColumnLevels) -> float:
    """The share of the column's values (of those `levels` holds) that convert to numbers
    once SYMBOLS are stripped."""
    values = pd.Series(list(levels.levels), dtype=object).str.replace(SYMBOLS, "", regex=True)
    return _share(levels, list(pd.to_numeric(values, errors="coerce").notna()))


def worth_asking(columns: Sequence[ColumnLevels]) -> tuple[str, ...]:
    """The text columns a run asks about, at most MAX_QUESTIONS: those of MIN_LEVELS to
    MAX_LEVELS levels (two levels are what an indicator already is; more than MAX_LEVELS
    cannot be ordered in a short reply) and those whose values look like dates or numbers.
    The ones that look like dates or numbers come first, then those whose levels mostly hold
    digits (ranges such as "1<=X<4" are scales more often than not), then the rest, each in
    the column order."""
    def typed(c: ColumnLevels) -> bool:
        return bool(c.counts) and (date_share(c) >= MOST or number_share(c) >= MOST)

    def scale_like(c: ColumnLevels) -> bool:
        return sum(bool(re.search(r"\d", level)) for level in c.levels) * 2 >= len(c.counts)

    asked = [(not typed(c), not scale_like(c), i, c.column) for i, c in enumerate(columns)
             if MIN_LEVELS <= c.distinct <= MAX_LEVELS or typed(c)]
    return tuple(column for *_, column in sorted(asked)[:MAX_QUESTIONS])


# ---- the question -------------------------------------------------------------------------


def answer_schema(levels: ColumnLevels) -> dict[str, Any]:
    """The reply's JSON schema: a kind, and an order whose items are the column's levels
    (none for a column with more levels than the prompt shows: it cannot be ordered)."""
    order: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
    if levels.complete and levels.counts:
        order = {"type": "array", "items": {"type": "string", "enum": list(levels.levels)},
                 "maxItems": len(levels.counts)}
    else:
        order["maxItems"] = 0
    return {"type": "object",
            "properties": {"kind": {"type": "string", "enum": list(KINDS)}, "order": order},
            "required": ["kind", "order"]}


def question(ctx: TaskContext, levels: ColumnLevels, temperature: float) -> ChatPrompt:
    """The question on one column's kind: its name and its levels, most frequent first (no
    counts, no task: with the counts and the task's line beside them, the embedded 1.5B model
    called every credit-g column tried, and "small, medium, large", a number held as text;
    without them it ordered sizes and named dates), the reply held to `answer_schema`. It
    has no reply start: llama.cpp constrains no continued reply by a schema."""
    shown = ", ".join(json.dumps(level, ensure_ascii=False) for level in levels.levels)
    more = "" if levels.complete else f", and {levels.distinct - len(levels.counts)} more"
    text = (
        f"The values of column {levels.column!r}: {shown}{more}.\n"
        "Answer in JSON with two keys.\n"
        '"kind": "ordered" if the values are levels that go from low to high (like "small" < '
        '"medium" < "large", or "<10" < "10<=X<20" < ">=20"); "date" if they are dates or '
        'times; "number" if they are numbers written as text; "identifier" if each row has its '
        'own value; "text" if they are sentences; else "category".\n'
        '"order": if ordered, every value once from lowest to highest; else [].')
    tokens = 32 + sum(len(level) // 2 + 3 for level in levels.levels) \
        if levels.complete else 32
    return ChatPrompt(
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
        max_tokens=min(tokens, 400), temperature=temperature, seed=ctx.seed, tag=TAG,
        json_schema=answer_schema(levels))


# ---- the answer ---------------------------------------------------------------------------


def read_answer(text: str) -> tuple[str, tuple[str, ...]] | str:
    """A reply's (kind, order), or why it cannot be read (fences and chatter around the JSON
    object are dropped)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return "the answer holds no JSON object"
    try:
        data = json.loads(text[start:end + 1], strict=False)
    except ValueError as exc:
        return f"the answer is not JSON ({exc})"
    if not isinstance(data, dict):
        return "the answer is not a JSON object"
    kind, order = data.get("kind"), data.get("order", [])
    if kind not in KINDS:
        return f"the answer's kind {kind!r} is none of {', '.join(KINDS)}"
    if not isinstance(order, list) or not all(isinstance(level, str) for level in order):
        return "the answer's order is not a list of levels"
    return kind, tuple(order)


def order_problem(order: Sequence[str], levels: ColumnLevels) -> str:
    """Why `order` is no order of the column's levels ("" when it names each exactly once)."""
    if not levels.complete:
        return (f"an order must name every level, and {levels.column!r} has "
                f"{levels.distinct}, more than {MAX_LEVELS}")
    known, seen = set(levels.levels), set()
    for level in order:
        if level not in known:
            return f"the order names {level!r}, which is not a level of {levels.column!r}"
        if level in seen:
            return f"the order names {level!r} twice"
        seen.add(level)
    missing = [level for level in levels.levels if level not in seen]
    if missing:
        return (f"the order misses level{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(repr, missing))}")
    return ""


def ordered_program(column: str, order: Sequence[str]) -> str:
    """The levels as their ranks, lowest 0: one new column; a level the rows never had is
    missing."""
    ranks = ", ".join(f"{level!r}: {rank}" for rank, level in enumerate(order))
    return (f"def {FUNCTION}(df):\n"
            f"    df[{column + '_level'!r}] = df[{column!r}].map({{{ranks}}})\n"
            "    return df\n")


def date_program(column: str) -> str:
    """A few parts of the date, as one program: year, month, day of the week, days since
    1970 (each value parsed alone, so a row's parts come from that row)."""
    return (f"def {FUNCTION}(df):\n"
            f"    when = pd.to_datetime(df[{column!r}], errors='coerce', utc=True, "
            "format='mixed')\n"
            f"    df[{column + '_year'!r}] = when.dt.year\n"
            f"    df[{column + '_month'!r}] = when.dt.month\n"
            f"    df[{column + '_weekday'!r}] = when.dt.day_of_week\n"
            f"    df[{column + '_days'!r}] = (when - pd.Timestamp('1970-01-01', tz='UTC'))"
            ".dt.days\n"
            "    return df\n")


def number_program(column: str) -> str:
    """The number a text holds, once SYMBOLS are stripped; missing where there is none."""
    return (f"def {FUNCTION}(df):\n"
            f"    df[{column + '_number'!r}] = pd.to_numeric(df[{column!r}].astype(str)"
            f".str.replace({SYMBOLS!r}, '', regex=True), errors='coerce')\n"
            "    return df\n")


def column_program(text: str, levels: ColumnLevels) -> tuple[str, str]:
    """The feature program a reply on `levels`' column gives and its plan, or ("", why not):
    a refusal that begins with REJECTED, for an answer that cannot be read, fails its check
    against the training rows, or names a kind that gives no program."""
    column = levels.column
    if not levels.counts:
        return "", f"{REJECTED} the training rows hold no text column {column!r}"
    answer = read_answer(text)
    if isinstance(answer, str):
        return "", f"{REJECTED} on column {column!r}, {answer}"
    kind, order = answer
    said = f"the LLM reads {column!r} as {KINDS[kind]}"
    if kind not in GIVES_PROGRAM:
        return "", f"{REJECTED} {said}, which gives no program"
    if kind == "ordered":
        problem = order_problem(order, levels)
        if problem:
            return "", f"{REJECTED} {said}, but {problem}"
        return ordered_program(column, order), said
    share = date_share(levels) if kind == "date" else number_share(levels)
    if share < MOST:
        return "", (f"{REJECTED} {said}, but only {share:.0%} of its values parse as "
                    f"{'dates' if kind == 'date' else 'numbers'}")
    return (date_program(column) if kind == "date" else number_program(column)), said


def levels_of(ctx: TaskContext, column: str) -> ColumnLevels:
    """The levels of one text column of the task (none for a column the rows lack)."""
    return next((c for c in ctx.text_levels if c.column == column),
                ColumnLevels(column, (), 0))
