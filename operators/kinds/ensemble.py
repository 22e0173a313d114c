"""The ensemble: a weighted combination of the best nodes' models, chosen by ensemble
selection over their kept predictions. The selection runs in the driver
(engine/evaluation/blend.py), so nothing runs; this module writes the node's plan and code."""

from __future__ import annotations

import re
from collections.abc import Mapping

from operators.context import TaskContext
from operators.harness import ensemble_code
from operators.kinds._base import EngineCode, OperatorKind, register
from operators.measure import Measurements
from search.node import Node, Operator

# The plan's "<member id> x<weight>" pairs: the one record of which nodes carry weight.
_WEIGHTED = re.compile(r"\b([0-9a-f]{12}) x(\d+)\b")


def ensemble_written(ctx: TaskContext, members: list[Node], weights: Mapping[str, int],
                     candidates: int) -> EngineCode:
    """The ensemble of `members` (best weight first), selected among `candidates` nodes."""
    plan = (f"ensemble selection over {candidates} nodes: "
            + ", ".join(f"{n.node_id} x{weights[n.node_id]}" for n in members))
    return EngineCode(plan, ensemble_code(ctx, [n.code for n in members],
                                          [weights[n.node_id] for n in members]))


def weighted_members(node: Node) -> list[str]:
    """The ids of the members an ensemble node's code runs (its plan names them with their
    weights), best weight first."""
    return [match.group(1) for match in _WEIGHTED.finditer(node.plan)]


def ensemble_cost(members: list[Node]) -> Measurements:
    """An ensemble's cost: its members' together (None when one of them was not measured)."""
    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v or 0.0 for v in values)

    return Measurements(total([n.train_seconds for n in members]),
                        total([n.predict_ms_per_row for n in members]),
                        total([n.model_mb for n in members]))


@register
class Ensemble(OperatorKind):
    operator = Operator.ENSEMBLE
