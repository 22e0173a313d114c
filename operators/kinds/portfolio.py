"""The portfolio: fixed, diverse configurations of the model families (search.families),
each written by the engine and run once, cheapest first, on the columns as they are (it runs
before any feature program exists). `family_code` also writes the floor's Optuna trials, on
the feature set their proposal names."""

from __future__ import annotations

import json

from operators.context import TaskContext
from operators.features import feature_programs
from operators.harness import assemble
from operators.kinds._base import EngineCode, FloorKind, register
from operators.models import model_code
from search.families import FAMILIES
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


def family_code(ctx: TaskContext, proposal: Proposal, what: str,
                journal: Journal) -> EngineCode:
    """The engine's model code of the proposal's family and hyperparameters, on its feature
    set's chain of kept programs (the set's node's own); `what` it is (a portfolio
    configuration, an Optuna trial) heads its plan."""
    params = json.dumps(proposal.param_dict)
    plan = f"{what} {proposal.idea}: {FAMILIES[proposal.family].description} with {params}"
    programs = feature_programs(journal.get(proposal.feature_set).code) \
        if proposal.feature_set else []
    if programs:
        plan += f", on feature set {proposal.feature_set} ({len(programs)} programs)"
    model = model_code(ctx, proposal.family, proposal.param_dict, programs)
    return EngineCode(plan, assemble(ctx, model), assemble(ctx, model, all_folds=True))


@register
class Portfolio(FloorKind):
    operator = Operator.PORTFOLIO

    def engine_code(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> EngineCode:
        return family_code(ctx, proposal, "portfolio configuration", journal)
