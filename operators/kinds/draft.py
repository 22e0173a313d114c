"""The draft: a root the LLM writes from the task alone, using one model family."""

from __future__ import annotations

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.kinds._base import OperatorKind, register
from operators.prompts import chat_prompt
from search.ideas import draft_idea
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


def draft_prompt(ctx: TaskContext, proposal: Proposal, draft_index: int) -> ChatPrompt:
    idea = proposal.idea or draft_idea(draft_index)
    tail = (
        f"# Your job\nWrite the model code (imports and fit_predict) using {idea}. "
        "Keep it simple and correct."
    )
    return chat_prompt(ctx, tail, proposal, ctx.max_tokens)


@register
class Draft(OperatorKind):
    operator = Operator.DRAFT

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        return draft_prompt(ctx, proposal, len(journal.draft_nodes))
