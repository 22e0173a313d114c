"""The portfolio: fixed, diverse configurations of the model families (search.families),
each written by the engine and run once, cheapest first."""

from __future__ import annotations

import json

from operators.context import TaskContext
from operators.harness import assemble
from operators.kinds._base import EngineCode, FloorKind, register
from operators.models import model_code
from search.families import FAMILIES
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


def family_code(ctx: TaskContext, proposal: Proposal, what: str) -> EngineCode:
    """The engine's model code of the proposal's family and hyperparameters; `what` it is
    (a portfolio configuration, an Optuna trial) heads its plan."""
    params = json.dumps(proposal.param_dict)
    plan = f"{what} {proposal.idea}: {FAMILIES[proposal.family].description} with {params}"
    model = model_code(ctx, proposal.family, proposal.param_dict)
    return EngineCode(plan, assemble(ctx, model), assemble(ctx, model, all_folds=True))


@register
class Portfolio(FloorKind):
    operator = Operator.PORTFOLIO

    def engine_code(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> EngineCode:
        return family_code(ctx, proposal, "portfolio configuration")
