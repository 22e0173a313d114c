"""The baseline root: LightGBM with default settings, written by the engine, which every
node's gain is measured against."""

from __future__ import annotations

from operators.context import TaskContext
from operators.harness import assemble, baseline_code
from operators.kinds._base import EngineCode, OperatorKind, register
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal

BASELINE_PLAN = "LightGBM with default settings on prepared features (engine baseline)"


@register
class Baseline(OperatorKind):
    operator = Operator.BASELINE

    def engine_code(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> EngineCode:
        model = baseline_code(ctx)
        return EngineCode(BASELINE_PLAN, assemble(ctx, model),
                          assemble(ctx, model, all_folds=True))
