"""The feature-program step (`features`): the LLM writes one short `add_features(df)`; the engine
checks its text, then runs it under the floor's best configuration (the reference) on the chain
of programs kept under it, and the step compares that with the reference on the same rows.

A narrow action on purpose: a 1.5B model writes a whole working script rarely, and a few lines
of pandas often; the engine does the tuning. The prompt's stable part (task, what a program is)
comes first and is the same for every program of a run; what changes (the programs already
tried, with their gains or the reason they were refused, and the columns the latest program's
model relied on most) comes last and is short. The kept programs a reply builds on are not
described in words: their statements begin the reply (`reply_start`).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence

from common.chat import ChatPrompt
from operators.column_kinds import column_program, levels_of, question
from operators.context import TaskContext
from operators.feature_checks import FUNCTION, assigned_columns, check_program, columns_read
from operators.features import (
    body_statements,
    completed,
    computations,
    does_something,
    feature_programs,
    in_words,
    program_source,
    reported_importances,
    with_column_names,
    without_columns,
    without_text_arithmetic,
)
from operators.harness import assemble
from operators.kinds._base import EngineCode, FloorKind, register
from operators.models import model_code, seeded
from operators.replies import Parsed, one_line
from search.journal import Journal
from search.node import Operator, Status
from search.policy import Proposal
from search.programs import REJECTED, gate_of, gate_pairs

# The reply ends at its first statement (STOP), which ends by token 48 in 98 % of replies: the
# cap only bounds a long one. Measured: benchmarks/results/llm-gain-2026-11-29c and -29d.
MAX_TOKENS = 48
# The reply ends after its first statement (the model adds comments and extra columns the engine
# throws away; measured: benchmarks/results/llm-gain-2026-11-29c and -29d). Matched after
# `reply_start`; a backend that writes the whole reply sends none (common.chat.ChatPrompt.stop).
STOP = ["\n```\n", "\n    df", "\n    #", "\n    return"]
# The reply begins, written for the model, with the fence, the function's first line and the
# kept programs' statements, then `    df`: it spends no tokens on them nor recomputes a kept
# column (measured: the same folders).
REPLY_HEAD = f"```python\ndef {FUNCTION}(df):\n"
NEXT_STATEMENT = "    df"
TRIED_SHOWN = 8  # the prompt lists the latest 8 to 16 programs tried, with their outcome

SYSTEM = ("You are a data scientist who writes short pandas feature-engineering functions. "
          "Reply with one ```python code block and nothing else.")

_NUMBERS = """a ratio, difference or product of related
numbers, a sum of parts"""
_TEXT = """a ratio, difference or product of related
numbers, a sum of parts, date parts (year, month, weekday), the length of a text or a number
parsed from it. Or fix a text column read with the wrong type: a date (into its parts), a
number held as text (pd.to_numeric with errors="coerce"), an identifier that carries no
signal (drop it)"""


def _job(ctx: TaskContext) -> str:
    """What a program is, for this task (the text options only where there is text): the
    same for every program of a run."""
    options = _TEXT if ctx.text_columns else _NUMBERS
    return f"""# What you write
One function `{FUNCTION}(df)`. df holds the feature columns above for some rows, never the
target `{ctx.target}`. Return df with ONE new column computed from a row's own values: {options}.
Choose columns whose names suggest a relation that helps predict the target.
Rules: pd, np, math and re are already imported; no comments; read no files; never use other
rows (no sum, mean, max, rank, groupby, shift or cumsum over the frame); guard divisions
(+ 1e-9); use only the column names listed above; never repeat a column already tried.
For example, on a task with other columns than this one:
```python
def {FUNCTION}(df):
    df["income_per_person"] = df["income"] / (df["household_size"] + 1e-9)
    return df
```
"""


def _tried(journal: Journal) -> str:
    """Every program tried, in the order tried, with what became of it: what the model should
    not repeat (a repetition is marked `again`, so it is plain to the model). The list only
    grows at its end, and drops its oldest lines TRIED_SHOWN at a time: each prompt then
    shares all but its last lines with the one before, which llama.cpp's prefix cache does
    not read again (a window sliding by one line would change every later prompt). A question
    on a column's kind that gave no scored program is no program the model wrote: not listed."""
    lines: list[str] = []
    seen: set[str] = set()
    programs = [n for n in journal.nodes_of(Operator.FEATURES) if n.status is not Status.LOST
                and (gate_of(n) is not None or not Proposal.of(n).column)]
    for node in sorted(programs, key=lambda n: n.step):
        gate = gate_of(node)
        if gate is not None:
            computed = program_computations(node.code)
            if gate.kept or not computed:
                line = (f"{'kept' if gate.kept else 'not kept'}: added "
                        f"{', '.join(gate.added) or '?'}")
            else:  # what it computed, not its name: a new name on it is no new program
                line = f"not kept: {'; '.join(in_words(v) for v in computed.values())}"
            told = f" (gain {gate.mean_gain:+.3g})"
        elif node.error.startswith(REJECTED):
            line, told = f"refused: {one_line(node.error.removeprefix(REJECTED))[:120]}", ""
        elif node.error:
            line, told = f"failed: {one_line(node.error)[:120]}", ""
        else:
            continue
        lines.append(f"- {'again, ' if line in seen else ''}{line}{told}")
        seen.add(line)
    shown = lines[max(0, (len(lines) - 1) // TRIED_SHOWN - 1) * TRIED_SHOWN:]
    return "# Programs already tried (do not repeat them)\n" + "\n".join(shown) + "\n\n" \
        if shown else ""


def _reliance(journal: Journal, columns: Sequence[str]) -> str:
    """What the model of the latest scored program relied on most, among the `columns` a
    program proposed now gets: the columns that carry the signal. A column of a program not
    kept is left out: named as the one most relied on, the model wrote it again and again
    (measured: benchmarks/results/llm-gain-2026-12-01)."""
    for node in reversed(sorted(journal.nodes_of(Operator.FEATURES), key=lambda n: n.step)):
        shares = reported_importances(node.stdout_tail)
        if shares:
            listed = ", ".join(f"{column} {share:.2f}" for column, share in shares.items()
                               if column in columns)
            return f"# The model of the latest program relied most on: {listed}\n\n" \
                if listed else ""
    return ""


def _unread(journal: Journal, columns: Sequence[str]) -> str:
    """The columns no program of the run has read yet: where a new program may look. A 1.5B
    model told what not to repeat repeats it; told where to look, it has somewhere to go
    (measured: benchmarks/results/llm-gain-2026-12-01)."""
    read: set[str] = set()
    for node in journal.nodes_of(Operator.FEATURES):
        read |= columns_read(own_program(node.code) or completed(program_source(node.reply)))
    unread = [column for column in columns if column not in read]
    return f"# Columns no program has read yet: {', '.join(unread)}\n\n" \
        if unread and len(unread) < len(columns) else ""


def chain_columns(journal: Journal, parent_id: str | None) -> list[str]:
    """The columns that the kept programs of the chain ending at `parent_id` add, the oldest
    program's first: what the rows of a program proposed there already hold."""
    chain: list[tuple[str, ...]] = []
    while parent_id:
        node = journal.get(parent_id)
        gate = gate_of(node)
        chain.append(gate.added if gate else ())
        parent_id = node.parent_id if node.operator is Operator.FEATURES else None
    return list(dict.fromkeys(c for added in reversed(chain) for c in added
                              if not c.startswith("-")))


def own_program(code: str) -> str:
    """A features node's own program, from its code: the last of the chain the code applies
    ("" for code that holds none, as a refused node's)."""
    programs = feature_programs(code)
    return programs[-1] if programs else ""


def program_computations(code: str) -> dict[str, str]:
    """What a features node's own program computes (`operators.features.computations`)."""
    program = own_program(code)
    return computations(program) if program else {}


def scored_computations(journal: Journal, parent_id: str | None) -> set[str]:
    """What the programs proposed on `parent_id` computed and were scored for there, kept or
    not. A program that only computes them again, under any name (the model names most
    columns alike), is refused on its text: a computation scored again and again passes the
    keep rule sooner or later by chance (measured: benchmarks/results/llm-gain-2026-11-29e and
    llm-gain-2026-12-01b)."""
    return _computed_by([node.code for node in journal.nodes_of(Operator.FEATURES)
                         if node.parent_id == parent_id and gate_of(node) is not None])


def set_computations(journal: Journal, parent_id: str | None) -> set[str]:
    """What was scored on `parent_id` (scored_computations) and what the kept programs of its
    chain compute: a program computing only these, under new names, adds nothing the set
    lacks."""
    return scored_computations(journal, parent_id) | {
        value for program in chain_programs(journal, parent_id)
        for value in computations(program).values()}


# How the refusal of a program that only repeats computations begins (after REJECTED).
REPEATS = "it computes what"


def _only_repeats(computed: Sequence[str], before: set[str], where: str) -> str:
    """The refusal of a program whose computations (in its order) were all computed `where`
    already (`before`); "" for one that computes something new, or nothing it can name."""
    if not computed or not set(computed) <= before:
        return ""
    done = "; ".join(in_words(v) for v in computed)
    return f"{REJECTED} {REPEATS} {where} ({done}): compute something new"


def _computed_by(codes: Sequence[str]) -> set[str]:
    """What the own programs of the nodes with these codes compute."""
    return {value for code in codes for value in program_computations(code).values()}


def chain_programs(journal: Journal, parent_id: str | None) -> list[str]:
    """The kept programs of the chain ending at `parent_id`, in the order they run."""
    return feature_programs(journal.get(parent_id).code) if parent_id else []


def chain_statements(journal: Journal, parent_id: str | None) -> str:
    """The body statements of the kept programs of the chain ending at `parent_id`: the start
    of a reply proposed there, before its own statement."""
    return "".join(body_statements(p) for p in chain_programs(journal, parent_id))


def reply_start(journal: Journal, parent_id: str | None) -> str:
    """What a feature program's reply proposed on `parent_id` begins with, written for the
    model: it writes one statement on from there."""
    return REPLY_HEAD + chain_statements(journal, parent_id) + NEXT_STATEMENT


@register
class Features(FloorKind):
    operator = Operator.FEATURES
    # A refused program is not asked for again (the next prompt lists the refusal): re-asked
    # ones were mostly refused again and never kept, at twice the LLM seconds. Measured:
    # benchmarks/results/llm-gain-2026-11-29 and -29c.
    re_asks = False

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        if proposal.column:  # the question on a text column's kind (operators/column_kinds.py)
            return question(ctx, levels_of(ctx, proposal.column), proposal.temperature)
        stable = f"# Task\n{(ctx.feature_preview or ctx.preview).strip()}\n\n{_job(ctx)}"
        columns = (*ctx.columns, *chain_columns(journal, proposal.parent_id))
        tail = (_tried(journal) + _reliance(journal, columns) + _unread(journal, columns)
                + f"Write {FUNCTION}(df) for the columns of this task.")
        return ChatPrompt(
            messages=[{"role": "system", "content": SYSTEM},
                      {"role": "user", "content": stable + "\n" + tail}],
            max_tokens=MAX_TOKENS, temperature=proposal.temperature, seed=ctx.seed,
            tag=self.operator.value, stop=STOP,
            reply_start=reply_start(journal, proposal.parent_id), never_names=(ctx.target,),
            column_names=columns, text_names=ctx.text_columns,
            kept_names=tuple(chain_columns(journal, proposal.parent_id)),
            never_computations=tuple(sorted(set_computations(journal, proposal.parent_id))))

    def read(self, text: str, ctx: TaskContext, proposal: Proposal,
             journal: Journal) -> Parsed:
        """The program, or why it is refused on its text: what the model wrote after the
        kept statements its reply was started with (a whole reply as written). Two kinds of
        statement are dropped from it: those that write a column its chain of kept programs
        already adds (those stay as the kept programs made them; a small model repeats them),
        and those that do arithmetic on text, which would fail on the rows. A program left
        with nothing to add, whose rest names what a dropped statement made, or that only
        computes what was already scored on its feature set (kept or not) is refused here,
        before it runs. The answer on a text column's kind is first made into its program
        (operators/column_kinds.py), or refused, and that program is then read as a reply."""
        if not proposal.column:
            return self._program(text, ctx, proposal, journal)
        program, said = column_program(text, levels_of(ctx, proposal.column))
        if not program:
            return Parsed("", "", said)
        parsed = self._program(f"```python\n{program}```", ctx, proposal, journal)
        return dataclasses.replace(parsed, plan=f"{said}: {parsed.plan}") \
            if parsed.plan else parsed

    def _program(self, text: str, ctx: TaskContext, proposal: Proposal,
                 journal: Journal) -> Parsed:
        given = reply_start(journal, proposal.parent_id).removesuffix(NEXT_STATEMENT)
        if text.startswith(given):  # the kept statements written for it are not its program
            text = REPLY_HEAD + text[len(given):]
        chain = chain_columns(journal, proposal.parent_id)
        # its rows hold the chain's columns: it runs after the kept programs
        columns = [*ctx.columns, *chain]
        source = with_column_names(completed(program_source(text)), columns)
        problem = check_program(source, columns, ctx.target)
        if problem:
            return Parsed("", source, f"{REJECTED} {problem}")
        new = without_columns(source, chain)
        if not does_something(new):
            written = ", ".join(sorted(assigned_columns(ast.parse(source))))
            return Parsed("", source, f"{REJECTED} it only computes columns that kept programs "
                                      f"already add ({written}): add new ones")
        trimmed, on_text = without_text_arithmetic(new, ctx.text_columns)
        if not does_something(trimmed):
            on = f" ({', '.join(on_text)})" if on_text else ""
            return Parsed("", source, f"{REJECTED} it does arithmetic on text{on}, which fails "
                                      "on the rows: compare a text column with one of its "
                                      "values instead, as (df[column] == value)")
        # what is left of a program that lost statements must stand on its own
        problem = check_program(trimmed, columns, ctx.target) if trimmed != source else ""
        if problem:
            return Parsed("", trimmed, f"{REJECTED} {problem}")
        added = sorted(assigned_columns(ast.parse(trimmed)))
        computed = list(computations(trimmed).values())
        repeated = _only_repeats(computed, set_computations(journal, proposal.parent_id),
                                 "was already scored on this feature set or is one of its "
                                 "columns") if computed else ""
        if repeated:
            return Parsed("", trimmed, repeated)
        return Parsed(f"feature program adding {', '.join(added) or 'columns'}", trimmed, "")

    def repeats(self, code: str, siblings: Sequence[str]) -> str:
        """A program computing only what programs now being scored on its feature set compute:
        the scored-there rule of `read` for a reply that arrives while the first copy is still
        being scored (measured: benchmarks/results/llm-gain-2026-12-01b)."""
        return _only_repeats(list(program_computations(code).values()), _computed_by(siblings),
                             "a program now being scored on this feature set computes")

    def steered(self, prompt: ChatPrompt, siblings: Sequence[str]) -> ChatPrompt:
        """A program scored and not kept is in the prompt's computations tried; one still
        being scored when the LLM is asked is not yet in the journal, so it is added here: the
        model writes its next program while the last is scored (measured:
        benchmarks/results/llm-gain-2026-12-02)."""
        running = _computed_by(siblings)
        if not running - set(prompt.never_computations):
            return prompt
        return dataclasses.replace(prompt, never_computations=tuple(
            sorted(running | set(prompt.never_computations))))

    def assembled(self, code: str, ctx: TaskContext, proposal: Proposal,
                  journal: Journal) -> EngineCode:
        """The reference configuration on the parent's chain of programs plus this one,
        checked on the training rows before the model is fitted. It runs every fold in one
        process, like the floor's own code: the program passed the text checks that let the
        floor's trials run a kept program there (operators/features.py), and one process
        instead of one per fold gives the floor back 4 starts of about 1.2 s and the imports
        of each program. Its other form fits the gate's sides with the program alone
        (`EngineCode.with_program_code`)."""
        chain = [*chain_programs(journal, proposal.parent_id), code]

        def run_code(pairs: tuple[tuple[int, int], ...], without: bool) -> str:
            return assemble(ctx, model_code(ctx, proposal.family, proposal.param_dict, chain,
                                            check=True, gate_pairs=pairs, gate_without=without),
                            all_folds=True)

        pairs = gate_pairs(seeded(ctx, proposal.family))
        first, later = pairs[:1], pairs[1:]
        model = model_code(ctx, proposal.family, proposal.param_dict, chain, check=True,
                           gate_pairs=first)
        second = (run_code(later, True), run_code(later, False)) if later else ()
        return EngineCode("", assemble(ctx, model), run_code(first, True),
                          run_code(first, False), second,
                          tuple(split for split, _ in pairs))
