"""Retrieved cases (seed 004, --memory): other tasks' working model code.

A `case` node runs a case as stored, with no LLM call (the floor proposes it); a `recall`
root is the LLM's adaptation of one, a draft of its own.
"""

from __future__ import annotations

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.failures import code_block
from operators.harness import assemble
from operators.kinds._base import EngineCode, FloorKind, OperatorKind, register
from operators.prompts import chat_prompt
from operators.retrieval import AS_STORED, Case, shortened
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


def recalled_case(ctx: TaskContext, proposal: Proposal) -> Case:
    """The retrieved case a recall step adapts (its id is the proposal's idea)."""
    for case in ctx.cases:
        if case.case_id == proposal.idea:
            return case
    raise ValueError(f"recall of case {proposal.idea!r}, which was not retrieved for this task")


def recall_prompt(ctx: TaskContext, proposal: Proposal) -> ChatPrompt:
    """Case-based drafting (seed 004): adapt working code of the nearest earlier task."""
    case = recalled_case(ctx, proposal)
    tail = (
        f"# Working model code from a similar task ({case.task_type}, {case.metric})\n"
        f"{code_block(shortened(case.code))}\n\n"
        "# Your job\nAdapt this code to the task above: keep its model, PARAMS and approach; "
        "change only what this task's target and predictions need (prepare() already handles "
        "the columns). If nothing needs to change, return it unchanged. Return the whole "
        "model code."
    )
    return chat_prompt(ctx, tail, proposal, ctx.max_tokens)


@register
class Recall(OperatorKind):
    operator = Operator.RECALL

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        return recall_prompt(ctx, proposal)


@register
class StoredCase(FloorKind):
    operator = Operator.CASE

    def engine_code(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> EngineCode:
        # Another task's code, written by an LLM there: it runs fold by fold like the LLM's
        # code here, not in one engine-trusted run of all folds.
        case = recalled_case(ctx, proposal)
        return EngineCode(f"{AS_STORED}: {case.operator} code of {case.dataset}",
                          assemble(ctx, case.code))
