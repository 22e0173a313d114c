"""A SELA rollout (`sela`): one script that follows the insight path the policy chose."""

from __future__ import annotations

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.kinds._base import OperatorKind, register
from operators.prompts import chat_prompt
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal
from search.sela import STAGE_NAMES


def sela_prompt(ctx: TaskContext, proposal: Proposal) -> ChatPrompt:
    """A SELA rollout: one script that follows the insight chosen at each stage of the path;
    stages past the path's end are left to the model, as SELA leaves them to its default plan."""
    insights = proposal.insights
    steps = "".join(
        f"- {name}: {insights[i] if i < len(insights) else 'your choice; keep it simple'}\n"
        for i, name in enumerate(STAGE_NAMES)
    )
    tail = (
        "# Your job\nWrite the model code (imports and fit_predict) that follows this plan:\n"
        f"{steps}Keep it simple and correct."
    )
    return chat_prompt(ctx, tail, proposal, ctx.max_tokens)


@register
class Rollout(OperatorKind):
    operator = Operator.SELA

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        return sela_prompt(ctx, proposal)
