"""Which tokens a feature program's reply may not write next, for the embedded backend to mask
while the model writes (the engine's checks stay the guarantee; this only saves the replies
they would refuse, each an LLM call counted against `--llm-patience`):

- `NameGuard`: a column name that must never be written anywhere (ChatPrompt.never_names, the
  target), nor begun by 3 of its letters, inside `df["...`; the new column's name is free text,
  so only those.
- `ReadGuard`: in what a statement computes (after its `=`), a column it reads must be one the
  rows have (ChatPrompt.column_names); after `df["a"] / df["` not `a` again, nor the second
  column of a computation of two columns already tried on the set
  (ChatPrompt.never_computations); after `-`, `*`, `/` or `%` not a text column
  (ChatPrompt.text_names), and after a text column none of those.
- `WriteGuard`: the column a statement assigns may not be one the set's kept programs add
  (ChatPrompt.kept_names): the checks drop such a statement.

Why: a small model reads the target though told not to, repeats computations already scored,
writes kept columns again and does arithmetic on text, each a refused reply; masked only as
whole names, it wrote a near name (`SLG / OBG`), so a read column is held to the rows' names
from its first letter. Measured: benchmarks/results/llm-gain-2026-12-01, -12-01c and -12-02.
Pure: the backend gives it the model's vocabulary, each token as text.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

# The name of a column being written: after `[` and a quote, up to the end of what is written
# (the quote not yet written: a token may begin with it).
_OPEN_NAME = re.compile(r"""\[\s*(['"]?)([^'"\n]*)$""")
_QUOTE = re.compile(r"""['"]""")
# A computation of two columns as Python writes it (`operators.features.computations`):
# `df['a'] / df['b']`, with the second guarded, `df['a'] / (df['b'] + 1e-09)`, or the guard
# misplaced, `df['a'] / df['b'] + 1e-09` (both forms score alike: one computation).
_TWO_COLUMNS = re.compile(r"""df\[(['"])(?P<first>.+?)\1\] (?P<op>[-+*/]) """
                          r"""(?:\(df\[(['"])(?P<guarded>.+?)\4\] \+ [0-9.e-]+\)"""
                          r"""|df\[(['"])(?P<second>.+?)\6\](?: \+ [0-9.e-]+)?)""")
# A statement that assigns a column (`    df["x"] = ...`): what it computes is its value.
_ASSIGNED = re.compile(r"""\s*df\[\s*(['"]).*?\1\s*\]\s*=(?!=)(?P<value>.*)$""")
# A column's name being read at the end of a value: after `df[`, and a quote once written.
_READ_NAME = re.compile(r"""\bdf\[\s*(['"]?)([^'"\n\]]*)$""")
# ... right after such an operator (_OPERATORS): `* df["`, `/ (df["`.
_OPERAND = re.compile(r"""[-*/%]\s*\(?\s*df\[\s*['"]?[^'"\n\]]*$""")
# A column read just closed, at the end of a value: `df["a"]`.
_CLOSED_READ = re.compile(r"""\bdf\[\s*(['"])([^'"\n]+)\1\s*\]\s*$""")
# The name of the column a statement assigns, being written: `    df["` and what follows.
_ASSIGNING = re.compile(r"""^\s*df\[\s*(['"]?)([^'"\n\]]*)$""")
# The statement being written has begun such a computation and is writing its second
# column's name: `df["x"] = df["a"] / (df["` and what follows, however spaced.
_WRITING_SECOND = re.compile(r"""^\s*\(?\s*df\[\s*(['"])(?P<first>[^'"\n]+)\1\s*\]\s*"""
                             r"""(?P<op>[-+*/])\s*\(?\s*df\[\s*['"]?[^'"\n]*$""")
# Operators that raise on text (`+` joins two labels, which the checks allow).
_OPERATORS = tuple("-*/%")
# A name begun with fewer letters of a never-name than this (or the whole of a shorter one)
# is left alone: `qu` may begin `quantity` as well as the target `quality`.
MIN_LETTERS = 3


class NameGuard:
    """The tokens that may not follow what a reply has written so far."""

    def __init__(self, vocabulary: Sequence[str], never: Sequence[str],
                 allowed: Sequence[str]) -> None:
        self._vocabulary = vocabulary
        self._never = [name for name in never if name and name not in allowed]
        self._allowed = list(allowed)
        self._banned: dict[str, list[int]] = {}

    def banned(self, written: str) -> list[int]:
        """Token ids that would make the column name being written at the end of `written`
        a never-name, or begin one by at least MIN_LETTERS of its letters (unless a column
        the reply may name begins so too); [] outside a column's name."""
        match = _OPEN_NAME.search(written[-200:])
        if match is None or not self._never:
            return []
        quoted, partial = match.groups()
        if not quoted and partial:
            return []  # `[name`: a variable, not a column's name
        if not any(name.startswith(partial) and name != partial for name in self._never):
            # another name, which nothing spells a never-name from; or one written already
            # (by a way this did not foresee: the checks refuse it), where every token would be
            return []
        key = quoted + partial
        if key not in self._banned:
            self._banned[key] = [i for i, text in enumerate(self._vocabulary)
                                 if self._spells_never(partial + text if quoted
                                                       else _quoted(text))]
        return self._banned[key]

    def _spells_never(self, name: str | None) -> bool:
        """Whether a column name written so far (up to its closing quote, when the token
        writes it) is or begins a never-name."""
        if not name:
            return False
        closed = _QUOTE.search(name)
        name = name[:closed.start()] if closed else name
        if any(column.startswith(name) for column in self._allowed):
            return False
        for never in self._never:
            if name.startswith(never):
                return True  # the never-name itself, or a name made from it
            if not closed and never.startswith(name) and len(name) >= min(MIN_LETTERS,
                                                                           len(never)):
                return True
        return False


def _quoted(text: str) -> str | None:
    """What a token written right after `[` begins a column's name with: its text after an
    opening quote; None when it opens none."""
    return text[1:] if text[:1] in ("'", '"') else None


class TokenIndex:
    """A vocabulary looked up by text: built once per model (151,000 tokens for Qwen2.5),
    shared by the ReadGuards of every prompt."""

    def __init__(self, vocabulary: Sequence[str]) -> None:
        self.size = len(vocabulary)
        self._ids: dict[str, list[int]] = {}
        for i, text in enumerate(vocabulary):
            self._ids.setdefault(text, []).append(i)
        self._texts = sorted(self._ids)
        # the tokens that open a name with its quote (after `df[`)
        self.opening = frozenset(i for text, ids in self._ids.items()
                                 if _quoted(text) is not None for i in ids)
        # the tokens that begin with an operator that raises on text (after a column read)
        self.arithmetic = sorted(i for text, ids in self._ids.items()
                                 if text.lstrip()[:1] in _OPERATORS for i in ids)

    def exactly(self, text: str) -> list[int]:
        return self._ids.get(text, [])

    def starting(self, prefix: str) -> list[int]:
        """The ids of the tokens whose text begins with `prefix`."""
        ids: list[int] = []
        for text in self._texts[bisect.bisect_left(self._texts, prefix):]:
            if not text.startswith(prefix):
                break
            ids.extend(self._ids[text])
        return ids


class ReadGuard:
    """The tokens that would make a column that the statement being written reads (after its
    `=`, inside `df["...`) one that is not among `columns`; right after the first column
    and operator of a computation of two columns (`df["a"] / df["`), the first again or
    the second of one among `computations`; right after `-`, `*`, `/` or `%`, one of
    `text`; and right after one of `text`, one of those operators. Names are masked by what
    they would spell from their first letter: up to a closing quote the name must be a
    column, and before one begin a column."""

    def __init__(self, tokens: TokenIndex, computations: Sequence[str],
                 columns: Sequence[str], text: Sequence[str] = ()) -> None:
        self._tokens = tokens
        self._columns = list(dict.fromkeys(columns))
        self._text = frozenset(text)
        self._seconds: dict[tuple[str, str], set[str]] = {}
        for value in computations:
            match = _TWO_COLUMNS.fullmatch(value)
            if match:
                self._seconds.setdefault((match["first"], match["op"]), set()).add(
                    match["second"] or match["guarded"])
        self._banned: dict[tuple[str, str, frozenset[str]], list[int]] = {}

    def banned(self, written: str) -> list[int]:
        """Token ids that may not come next at the end of `written`; [] outside what a
        statement's computation reads, and after what it reads but a text column."""
        statement = _ASSIGNED.match(written[written.rfind("\n") + 1:])
        if not statement:
            return []
        value = statement["value"]
        closed = _CLOSED_READ.search(value)
        if closed:
            return self._tokens.arithmetic if closed[2] in self._text else []
        name = _READ_NAME.search(value)
        if not name:
            return []
        quote, partial = name.groups()
        if not quote and partial:
            return []  # `df[name`: a variable, not a column's name
        second = _WRITING_SECOND.search(value)
        held = frozenset({second["first"], *self._seconds.get((second["first"], second["op"]),
                                                             ())} if second else ())
        if _OPERAND.search(value):
            held |= self._text
        key = (quote, partial, held)
        if key not in self._banned:
            names = [c for c in self._columns if c not in held and c.startswith(partial)]
            allowed = self._spelling(names, partial, quote)
            # begun otherwise than any column (or only a held one): too late, the checks
            # refuse it; after `df[` only the tokens that open the name are held
            self._banned[key] = [] if not names else \
                sorted(set(range(self._tokens.size)) - allowed) if quote else \
                sorted(self._tokens.opening - allowed)
        return self._banned[key]

    def _spelling(self, names: Sequence[str], partial: str, quote: str) -> set[int]:
        """The tokens that go on from `partial` (after `quote`; none: the token opens it)
        towards one of `names`, or end one with a closing quote and what follows it."""
        allowed: set[int] = set()
        for name in names:
            rest = name[len(partial):]
            for lead in ("",) if quote else ("'", '"'):
                allowed.update(self._tokens.exactly(lead) if lead else ())  # `df[` + quote
                for end in range(1, len(rest) + 1):
                    allowed.update(self._tokens.exactly(lead + rest[:end]))
                # the quote it opened with: the other would go on with the string
                allowed.update(self._tokens.starting(lead + rest + (quote or lead)))
        return allowed


class WriteGuard:
    """The tokens that would close the name of the column a statement assigns (`    df["...`
    at the start of a line) as one of `kept`, the columns the feature set's kept programs
    add. The name is free text otherwise."""

    def __init__(self, tokens: TokenIndex, kept: Sequence[str]) -> None:
        self._tokens = tokens
        self._kept = list(dict.fromkeys(kept))
        self._banned: dict[str, list[int]] = {}

    def banned(self, written: str) -> list[int]:
        """Token ids that may not come next at the end of `written`; [] outside the name of
        the column a statement assigns."""
        name = _ASSIGNING.match(written[written.rfind("\n") + 1:]) if self._kept else None
        if not name:
            return []
        quote, partial = name.groups()
        if not quote and partial:
            return []  # `df[name`: a variable
        key = quote + partial
        if key not in self._banned:
            ids: set[int] = set()
            for kept in self._kept:
                if kept.startswith(partial):
                    rest = kept[len(partial):]
                    for lead in (quote,) if quote else ("'", '"'):
                        opened = "" if quote else lead  # in the token, or written before it
                        for closing in ("'", '"'):  # the other quote: a name gone wrong
                            ids.update(self._tokens.starting(opened + rest + closing))
            self._banned[key] = sorted(ids)
        return self._banned[key]
