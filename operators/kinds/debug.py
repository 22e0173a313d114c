"""The debug step: a fix of a failed node, shown its error (and, with --memory, the edit that
cured the same error in an earlier run)."""

from __future__ import annotations

import difflib

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.failures import failure_section
from operators.kinds._base import OperatorKind, register
from operators.prompts import chat_prompt, notes
from operators.retrieval import nearest_fix
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal

FIX_LINES = 16  # of a remembered fix's diff: the prompt stays short
# From this debug depth of the parent on, the step asks for the smallest edit (issue 10): the
# last debug step allowed.
LAST_RESORT_DEPTH = 2


def debug_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal,
                 last_resort: bool = False, reflection: str = "") -> ChatPrompt:
    assert proposal.parent_id is not None
    ask = (
        "Make the smallest possible edit that fixes this error; change nothing else."
        if last_resort
        else "Fix the bug. Return the whole corrected model code."
    )
    tail = (
        failure_section(journal, proposal.parent_id)
        + ("\n" + notes(reflection) if reflection else "")
        + _fix_section(ctx, journal.get(proposal.parent_id).error)
        + f"\n# Your job\n{ask}"
    )
    return chat_prompt(ctx, tail, proposal, ctx.max_tokens)


def _fix_section(ctx: TaskContext, error: str) -> str:
    """The edit that cured the same error in an earlier run (--memory), as a short diff."""
    fix = nearest_fix(error, ctx.fingerprint, ctx.fixes) if ctx.fixes and error else None
    if fix is None:
        return ""
    diff = [line for line in difflib.unified_diff(
        fix.failed.splitlines(), fix.fixed.splitlines(), lineterm="", n=0)
        if not line.startswith(("---", "+++", "@@"))][:FIX_LINES]
    if not diff:
        return ""
    return ("\n# The same error was fixed in an earlier run by this edit\n"
            + "```diff\n" + "\n".join(diff) + "\n```\n")


@register
class Debug(OperatorKind):
    operator = Operator.DEBUG
    reflects = True

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        assert proposal.parent_id is not None
        last = journal.debug_depth(proposal.parent_id) >= LAST_RESORT_DEPTH
        return debug_prompt(ctx, proposal, journal, last_resort=last, reflection=reflection)

    def reflection_job(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> str:
        assert proposal.parent_id is not None
        return (failure_section(journal, proposal.parent_id)
                + "\n# Your job\nDo not write code. In at most three short sentences: what "
                "caused this error, and what exactly must change to fix it?")
