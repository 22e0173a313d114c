"""The improve step: one targeted change to a working node's model code."""

from __future__ import annotations

from dataclasses import replace

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.failures import code_block
from operators.harness import model_part
from operators.kinds._base import OperatorKind, register
from operators.prompts import chat_prompt, notes
from operators.replies import one_line
from search.ideas import improve_idea
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


def current_code(ctx: TaskContext, journal: Journal, parent_id: str) -> str:
    """The improve context: the parent's code and score, and what siblings already tried."""
    parent = journal.get(parent_id)
    tried = [c.plan for c in journal.children(parent.node_id) if c.plan][-4:]
    score = "n/a" if parent.metric_raw is None else f"{parent.metric_raw:.5g}"
    history = "".join(f"\n- {one_line(p)}" for p in tried)
    return (
        f"# Current model code (valid {ctx.metric} = {score})\n"
        f"{code_block(model_part(parent.code))}\n\n"
        + (f"# Already tried from this code{history}\n\n" if history else "")
    )


def _parent(proposal: Proposal) -> str:
    assert proposal.parent_id is not None
    return proposal.parent_id


def improve_change(proposal: Proposal, journal: Journal) -> str:
    """The change an improve step is asked for: the policy's hint, else the next idea of the
    pool (siblings counted, so concurrent steps on one parent try different things)."""
    return proposal.idea or improve_idea(len(journal.children(_parent(proposal))))


def improve_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal,
                   reflection: str = "") -> ChatPrompt:
    tail = (
        current_code(ctx, journal, _parent(proposal))
        + notes(reflection)
        + "# Your job\nImprove the score with ONE targeted change: "
        f"{improve_change(proposal, journal)}. Return the whole updated model code."
    )
    return chat_prompt(ctx, tail, proposal, ctx.max_tokens)


@register
class Improve(OperatorKind):
    operator = Operator.IMPROVE
    reflects = True

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        return improve_prompt(ctx, proposal, journal, reflection)

    def pinned(self, proposal: Proposal, journal: Journal) -> Proposal:
        # A sibling finishing before the code call would move the idea pool on, and the step
        # would be asked for another change than the one reflected on.
        return replace(proposal, idea=improve_change(proposal, journal))

    def reflection_job(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> str:
        # The step itself is told which change to make (the idea pools keep siblings apart),
        # so the reflection plans that change instead of proposing a competing one.
        return (current_code(ctx, journal, _parent(proposal))
                + "# Your job\nThe next step will make this change: "
                f"{improve_change(proposal, journal)}. Do not write code. In at most three "
                "short sentences: what limits this score, and how exactly should this change "
                "be made to this code (which columns, parameters, values)?")
