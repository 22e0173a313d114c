"""The data analyst's step (seed 003, --analyst): an exploration script run before any draft;
what it prints is its result. The script's head, parsing and findings are in
operators/analyst.py."""

from __future__ import annotations

from common.chat import ChatPrompt
from operators.analyst import (
    ANALYSIS_SECONDS,
    analysis_prompt,
    parse_analysis,
    silent_analysis_error,
)
from operators.context import TaskContext
from operators.kinds._base import OperatorKind, register
from operators.prompts import SCRIPT_ASK
from operators.replies import Parsed
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


@register
class Analyze(OperatorKind):
    operator = Operator.ANALYZE
    repair_ask = SCRIPT_ASK

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        return analysis_prompt(ctx, proposal, journal)

    def read(self, text: str, ctx: TaskContext, proposal: Proposal,
             journal: Journal) -> Parsed:
        return parse_analysis(text, ctx)

    def seconds(self, exec_timeout: float, floor_seconds: float | None) -> float:
        # A preamble every draft waits for, not a candidate: it gets less time than one.
        return min(exec_timeout, ANALYSIS_SECONDS)

    def printed_failure(self, stdout: str) -> str:
        return silent_analysis_error(stdout)
