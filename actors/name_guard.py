"""Which tokens would spell a column name that a reply must never write (ChatPrompt.never_names,
a feature program's target): the embedded backend masks them while the model writes a column's
name (`df["...`), so that the model writes another column instead of one the engine's checks
would refuse. The checks stay the guarantee; this only saves the replies they would refuse.

Why: on concrete, 7 of a run's 10 programs read the target `strength` (and named a column
after it) at `4560f8f`, each refused and counted against `--llm-patience`, though the prompt
names the target and says a program never gets it; moneyball's runs refused 7 such in one
run. Pure: the backend gives it the model's vocabulary, each token as text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# The name of a column being written: after `[` and a quote, up to the end of what is written
# (the quote not yet written: a token may begin with it).
_OPEN_NAME = re.compile(r"""\[\s*(['"]?)([^'"\n]*)$""")
_QUOTE = re.compile(r"""['"]""")
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
