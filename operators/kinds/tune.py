"""An Optuna trial (`tune`), asked in the driver by the floor: new hyperparameters for a model
family on a feature set, or new values of an LLM-written node's `PARAMS` dict."""

from __future__ import annotations

import json

from operators.context import TaskContext
from operators.harness import assemble, model_part
from operators.kinds._base import EngineCode, FloorKind, register
from operators.kinds.cases import engine_form
from operators.kinds.portfolio import family_code
from operators.params import with_params
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


@register
class Tune(FloorKind):
    operator = Operator.TUNE

    def engine_code(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> EngineCode:
        if proposal.family:
            return family_code(ctx, proposal, "Optuna trial", journal)
        # A trial of an LLM-written node: its code with new PARAMS values, which stays
        # LLM-written code, so it runs fold by fold like its parent; a trial of a stored case
        # in engine form runs every fold in one process, as that case did.
        parent = journal.get(str(proposal.parent_id))
        plan = (f"Optuna trial of node {proposal.parent_id}'s PARAMS: "
                f"{json.dumps(proposal.param_dict)}")
        model = with_params(model_part(parent.code), proposal.param_dict)
        if parent.operator is Operator.CASE and engine_form(ctx, model) is not None:
            return EngineCode(plan, assemble(ctx, model), assemble(ctx, model, all_folds=True))
        return EngineCode(plan, assemble(ctx, model))
