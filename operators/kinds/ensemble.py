"""The ensemble: a weighted combination of the best nodes' models, chosen by ensemble
selection over their kept predictions. The selection runs in the driver
(engine/evaluation/blend.py), so nothing runs; this module writes the node's plan and its
script, which runs each member's model code in a namespace of its own."""

from __future__ import annotations

import re
from collections.abc import Mapping

from operators.context import TaskContext
from operators.harness import (
    assemble,
    defines_make_model,
    ensemble_vote,
    model_functions,
    model_part,
)
from operators.kinds._base import EngineCode, OperatorKind, register
from operators.measure import Measurements
from search.node import Node, Operator

# The plan's "<member id> x<weight>" pairs: the one record of which nodes carry weight.
_WEIGHTED = re.compile(r"\b([0-9a-f]{12}) x(\d+)\b")


# The module-level names a member's model code has when it runs as its own node.
_MEMBER_SCOPE = ('"Encoded": Encoded, "prepare": prepare, "apply_programs": apply_programs, '
                 '"np": np, "pd": pd, "os": os, "re": re, "TARGET": TARGET')

_ENSEMBLE = """import numpy as np

# The members' model code, each run in its own namespace so their names cannot clash, and the
# weight of each (ensemble selection: how often it was picked).
MEMBERS = __MEMBERS__
WEIGHTS = __WEIGHTS__


def _member(source, X, y, X_valid, X_test):
    # Bound to this call's rows: code that uses them outside fit_predict runs here as it
    # ran as its own node.
    scope = {__SCOPE__, "_treeml_main": True,
             "X": X.copy(), "y": y.copy(), "X_valid": X_valid.copy(), "X_test": X_test.copy(),
             "train": X.assign(**{TARGET: y.to_numpy()}), "__name__": "member"}
    exec(compile(source, "member", "exec"), scope)
    return scope["fit_predict"](X.copy(), y.copy(), X_valid.copy(), X_test.copy())


def _combine(preds):
__COMBINE__

def fit_predict(X, y, X_valid, X_test):
    outs = [_member(source, X, y, X_valid, X_test) for source in MEMBERS]
    return _combine([v for v, _ in outs]), _combine([t for _, t in outs])
"""

# Every member a make_model(): the ensemble is one too, so a saved answer keeps it fitted.
_ENSEMBLE_MODEL = """import numpy as np

# The members' model code, each run in its own namespace so their names cannot clash, and the
# weight of each (ensemble selection: how often it was picked).
MEMBERS = __MEMBERS__
WEIGHTS = __WEIGHTS__


def _member(source):
    scope = {__SCOPE__, "_treeml_main": False, "__name__": "member"}
    exec(compile(source, "member", "exec"), scope)
    return scope["make_model"]()


class Ensemble:
    \"\"\"The members fitted on the same rows; their predictions combined by WEIGHTS.\"\"\"

    def __init__(self, members):
        self.members = members

    def fit(self, X, y):
        for member in self.members:
            member.fit(X.copy(), y.copy())
        return self

    def predict(self, X):
        return _combine([member.predict(X.copy()) for member in self.members])

    def predict_proba(self, X):
        return _combine([member.predict_proba(X.copy()) for member in self.members])


def _combine(preds):
__COMBINE__

"""

_MEAN = """    columns = [np.asarray(p, dtype=float).reshape(len(p), -1)[:, 0] for p in preds]
    return np.average(columns, axis=0, weights=WEIGHTS)
"""

_MEAN_PROBA = """    arrays = []
    for p in preds:  # binary members may return the positive class's probability alone
        p = np.asarray(p, dtype=float)
        arrays.append(np.column_stack([1 - p, p]) if p.ndim == 1 else p)
    return np.average(arrays, axis=0, weights=WEIGHTS)
"""

# Weighted vote; a tie goes to the label of the earliest member among the tied.
_VOTE = """    labels = [list(_treeml_labels(p)) for p in preds]
    out = []
    for row in zip(*labels):
        score = {}
        for value, weight in zip(row, WEIGHTS):
            score[str(value)] = score.get(str(value), 0) + weight
        top = max(score.values())
        out.append(next(v for v in row if score[str(v)] == top))
    return np.asarray(out, dtype=object)
"""


def ensemble_code(ctx: TaskContext, member_codes: list[str],
                  weights: list[int] | None = None) -> str:
    """The assembled script of an engine-written ensemble of model codes (default weights:
    equal); a make_model() of its own when every member has one."""
    combine = _VOTE if ensemble_vote(ctx) else _MEAN_PROBA if ctx.needs_proba else _MEAN
    sources = "[\n" + "".join(f"    {model_part(c)!r},\n" for c in member_codes) + "]"
    models = all(defines_make_model(c) for c in member_codes)
    model = ((_ENSEMBLE_MODEL if models else _ENSEMBLE)
             .replace("__MEMBERS__", sources).replace("__SCOPE__", _MEMBER_SCOPE)
             .replace("__WEIGHTS__", repr(weights or [1] * len(member_codes)))
             .replace("__COMBINE__", combine.rstrip("\n")))
    if models:
        model += model_functions(ctx, "Ensemble([_member(source) for source in MEMBERS])")
    return assemble(ctx, model)


def ensemble_written(ctx: TaskContext, members: list[Node], weights: Mapping[str, int],
                     candidates: int) -> EngineCode:
    """The ensemble of `members` (best weight first), selected among `candidates` nodes."""
    plan = (f"ensemble selection over {candidates} nodes: "
            + ", ".join(f"{n.node_id} x{weights[n.node_id]}" for n in members))
    return EngineCode(plan, ensemble_code(ctx, [n.code for n in members],
                                          [weights[n.node_id] for n in members]))


def _plan_weights(node: Node) -> dict[str, int]:
    """The members and weights a node's plan names, best weight first (none but an
    ensemble's)."""
    return {match.group(1): int(match.group(2)) for match in _WEIGHTED.finditer(node.plan)}


def weighted_members(node: Node) -> list[str]:
    """The ids of the members an ensemble node's code runs (its plan names them with their
    weights), best weight first."""
    return list(_plan_weights(node))


def member_weights(node: Node) -> dict[str, int]:
    """What a node's predictions are made of: an ensemble's members with their weights (its
    plan), best first; any other node is all its own."""
    return _plan_weights(node) if node.operator.traits.combines else {node.node_id: 1}


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
