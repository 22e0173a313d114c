"""The reflection (seed 001, --reflect): before a debug or improve step, one short call on
what failed or what limits the score; its text goes into that step's prompt. Part of the same
job, so one node, two LLM calls: `reflect` tags the call, never a node."""

from __future__ import annotations

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.kinds._base import OperatorKind, kind_of, register
from operators.prompts import chat_prompt
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal

REFLECT_TOKENS = 150  # three sentences; a longer reflection only delays the code call


def reflect_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal) -> ChatPrompt:
    """Reflexion (seed 001): before a debug or improve step, ask what failed or what limits the
    score and what to change, in words; the step's own kind says what to reflect on."""
    assert proposal.parent_id is not None
    tail = kind_of(proposal.operator).reflection_job(ctx, proposal, journal)
    return chat_prompt(ctx, tail, proposal, REFLECT_TOKENS, tag=Operator.REFLECT)


@register
class Reflect(OperatorKind):
    """Its prompt is asked on behalf of the step it precedes (`proposal` is that step's)."""

    operator = Operator.REFLECT
    executes = False

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        return reflect_prompt(ctx, proposal, journal)
