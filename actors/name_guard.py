"""Which tokens would spell a column name that a reply must never write (ChatPrompt.never_names,
a feature program's target): the embedded backend masks them while the model writes a column's
name (`df["...`), so that the model writes another column instead of one the engine's checks
would refuse. The checks stay the guarantee; this only saves the replies they would refuse.
`RepeatGuard` does the same for the second column of a computation of two columns already
tried (ChatPrompt.never_computations): after `df["SLG"] / df["`, the one that would make it
`SLG / OBP` again.

Why (names): on concrete, 7 of a run's 10 programs read the target `strength` (and named a column
after it) at `4560f8f`, each refused and counted against `--llm-patience`, though the prompt
names the target and says a program never gets it; moneyball's runs refused 7 such in one
run. Why (repeats): in the eleventh measurement's 14 LLM runs (benchmarks/results/
llm-gain-2026-12-01c), 43 of 149 programs were refused as repeats of a computation already
scored on their feature set, each an LLM call counted against `--llm-patience`; 31 of them
repeated a ratio, difference, sum or product of two columns (moneyball's fold 1 wrote
`SLG / OBP` five times in 12 programs). Pure: the backend gives it the model's vocabulary,
each token as text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# The name of a column being written: after `[` and a quote, up to the end of what is written
# (the quote not yet written: a token may begin with it).
_OPEN_NAME = re.compile(r"""\[\s*(['"]?)([^'"\n]*)$""")
_QUOTE = re.compile(r"""['"]""")
# A computation of two columns as Python writes it (`operators.features.computations`):
# `df['a'] / df['b']`, or with the second guarded, `df['a'] / (df['b'] + 1e-09)`.
_TWO_COLUMNS = re.compile(r"""df\[(['"])(?P<first>.+?)\1\] (?P<op>[-+*/]) """
                          r"""(?:\(df\[(['"])(?P<guarded>.+?)\4\] \+ [0-9.e-]+\)"""
                          r"""|df\[(['"])(?P<second>.+?)\6\])""")
# The statement being written has begun such a computation and is writing its second
# column's name: `df["x"] = df["a"] / (df["` and what follows, however spaced.
_WRITING_SECOND = re.compile(r"""=\s*\(?\s*df\[\s*(['"])(?P<first>[^'"\n]+)\1\s*\]\s*"""
                             r"""(?P<op>[-+*/])\s*\(?\s*df\[\s*['"]?[^'"\n]*$""")
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


class RepeatGuard:
    """The tokens that would make a computation of two columns one of `computations` again:
    the second column's name, masked once the statement has written the first column and the
    operator (`df["a"] / df["`) of such a computation. A repeat written otherwise (another
    operator order, a third column) gets through, and the checks refuse it."""

    def __init__(self, vocabulary: Sequence[str], computations: Sequence[str],
                 allowed: Sequence[str]) -> None:
        seconds: dict[tuple[str, str], list[str]] = {}
        for value in computations:
            match = _TWO_COLUMNS.fullmatch(value)
            if match:
                seconds.setdefault((match["first"], match["op"]), []).append(
                    match["second"] or match["guarded"])
        self._guards = {pair: NameGuard(vocabulary, names,
                                        [c for c in allowed if c not in names])
                        for pair, names in seconds.items()}

    def banned(self, written: str) -> list[int]:
        """Token ids that would complete, at the end of `written`, the second column of a
        computation already tried; [] anywhere else."""
        statement = written[written.rfind("\n") + 1:]
        match = _WRITING_SECOND.search(statement)
        guard = match and self._guards.get((match["first"], match["op"]))
        return guard.banned(written) if guard else []
