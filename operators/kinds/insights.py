"""SELA's insight proposer (`insights`): ideas for one stage of a solution; the reply is a
list of ideas, not code, and nothing runs."""

from __future__ import annotations

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.kinds._base import OperatorKind, register
from operators.prompts import chat_prompt
from operators.replies import Parsed, parse_insights
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal
from search.sela import STAGES, encode_insights

INSIGHTS_ASKED = 5  # SELA expands 5 children per node: one idea per child
INSIGHTS_ASK = f"Reply again with only a JSON list of {INSIGHTS_ASKED} short strings."


def insights_prompt(ctx: TaskContext, proposal: Proposal) -> ChatPrompt:
    """SELA's insight proposer, one stage per request (`proposal.stage` names the stage): short
    replies a small model gets right, and the three stages are asked for in parallel."""
    about = dict(STAGES).get(proposal.stage, "")
    tail = (
        f"# Your job\nDo not write code now. Propose {INSIGHTS_ASKED} different, concrete ideas "
        f"for the {proposal.stage} step of a solution to this task"
        + (f" ({about})" if about else "")
        + ". Each idea is one short sentence that fits the data above and can be done with "
        "pandas, numpy, scikit-learn and lightgbm (nothing else is installed).\n"
        f"Reply with only a JSON list of {INSIGHTS_ASKED} strings, e.g. "
        '["first idea", "second idea"].'
    )
    return chat_prompt(ctx, tail, proposal, 300)


@register
class Insights(OperatorKind):
    """Its node is `ok` with the ideas as its plan (a JSON list) and no metric, or `buggy`
    when none could be read."""

    operator = Operator.INSIGHTS
    executes = False
    repair_ask = INSIGHTS_ASK

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        return insights_prompt(ctx, proposal)

    def read(self, text: str, ctx: TaskContext, proposal: Proposal,
             journal: Journal) -> Parsed:
        parsed = parse_insights(text)
        if parsed.problem:
            return Parsed("", "", parsed.problem)
        return Parsed(encode_insights(parsed.insights), "", "")
