"""The engine's own work, which needs no LLM call: the floor under the LLM's ideas (issue 25).

On 2 cores the executor sat idle 89 % of a run while the LLM thought. Whenever an executor has
nothing LLM-written to run, the loop asks the floor:

1. the portfolio (`search.families.PORTFOLIO`): fixed, diverse configurations, cheapest first;
2. then Optuna trials, asked and told here (the driver), run by the executors: TPE over the
   hyperparameters of the families doing best so far, two trials of the best family for one
   of the runner-up. Every node of a family (baseline root, portfolio, trials) is a trial of
   that family's study, so the sampler starts from what the portfolio found.

And, with no executor at all, ensemble selection (`engine/blend.py`) over the best nodes' kept
predictions, whenever at least `ensemble_every` new candidates arrived since the last one.

Everything but which trials are in flight is rebuilt from the Journal, so a resumed run goes
on with the same studies; trials in flight at a kill come back as plain results.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from typing import Any

import optuna

from search.families import FAMILIES, PORTFOLIO, Dimension
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import InFlightKey, Proposal

ENGINE_FAMILY_OPERATORS = (Operator.BASELINE, Operator.PORTFOLIO, Operator.TUNE)
# The baseline root's configuration as a point of the lgbm space (LightGBM's defaults; its
# zero regularisation is the space's floor).
BASELINE_PARAMS: dict[str, Any] = {
    "n_estimators": 100, "learning_rate": 0.1, "num_leaves": 31, "min_child_samples": 20,
    "subsample": 1.0, "colsample_bytree": 1.0, "reg_alpha": 1e-8, "reg_lambda": 1e-8,
}
ENSEMBLE_CANDIDATES = 20  # the best eligible nodes ensemble selection chooses among
_GONE = (Status.LOST, Status.KILLED)


def distributions(space: tuple[Dimension, ...]) -> dict[str, optuna.distributions.BaseDistribution]:
    out: dict[str, optuna.distributions.BaseDistribution] = {}
    for name, kind, low, high in space:
        if kind == "categorical":
            out[name] = optuna.distributions.CategoricalDistribution(list(low))
        elif kind.endswith("int"):
            out[name] = optuna.distributions.IntDistribution(low, high, log=kind == "log_int")
        else:
            out[name] = optuna.distributions.FloatDistribution(low, high,
                                                               log=kind == "log_float")
    return out


def ensemble_candidates(journal: Journal) -> list[Node]:
    """The best eligible scored nodes whose code has model code to combine, best first."""
    nodes = [n for n in journal.eligible_nodes
             if n.operator is not Operator.ENSEMBLE and n.has_model_code]
    return sorted(nodes, key=lambda n: (-(n.metric or 0.0), n.step))[:ENSEMBLE_CANDIDATES]


class Floor:
    """Proposes the engine's own nodes; `observe` every finished node."""

    def __init__(self, seed: int = 0, *, portfolio: bool = True, tuning: bool = True,
                 ensembles: bool = True, ensemble_every: int = 3) -> None:
        self.seed = seed
        self.portfolio = portfolio
        self.tuning = tuning
        self.ensembles = ensembles
        self.ensemble_every = ensemble_every
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._studies: dict[str, optuna.Study] = {}
        self._asked: dict[str, int] = {}  # hint of a trial in flight -> its trial number
        self._done_portfolio: set[str] = set()
        self._seen: set[str] = set()
        self._last_ensemble: frozenset[str] = frozenset()
        self._trials = 0

    # ---- what to run -----------------------------------------------------------------------

    def propose(self, journal: Journal, in_flight: Mapping[InFlightKey, int], *,
                executor_free: bool) -> Proposal | None:
        for node in journal:
            self.observe(node)
        ensemble = self._ensemble(journal, in_flight)
        if ensemble is not None or not executor_free:
            return ensemble
        if self.portfolio:
            for name, family, params in PORTFOLIO:
                if name not in self._done_portfolio:
                    self._done_portfolio.add(name)  # in flight now; a loss is not retried
                    return Proposal(Operator.PORTFOLIO, None, 0.0, idea=name, family=family,
                                    params=tuple(sorted(params.items())))
        if self.tuning:
            return self._trial(journal)
        return None

    def _ensemble(self, journal: Journal,
                  in_flight: Mapping[InFlightKey, int]) -> Proposal | None:
        if not self.ensembles or any(op is Operator.ENSEMBLE for op, _ in in_flight):
            return None
        ids = frozenset(n.node_id for n in ensemble_candidates(journal))
        new = len(ids - self._last_ensemble)
        if len(ids) < 2 or new < (2 if not self._last_ensemble else self.ensemble_every):
            return None
        self._last_ensemble = ids
        best = ensemble_candidates(journal)
        return Proposal(Operator.ENSEMBLE, best[0].node_id, 0.0,
                        members=tuple(n.node_id for n in best))

    def _trial(self, journal: Journal) -> Proposal:
        ranked = self._families_by_score(journal)
        family = ranked[1] if self._trials % 3 == 2 and len(ranked) > 1 else ranked[0]
        self._trials += 1
        study = self._study(family)
        trial = study.ask(distributions(FAMILIES[family].space))
        proposal = Proposal(Operator.TUNE, None, 0.0, idea=f"{family} trial {trial.number}",
                            family=family, params=tuple(sorted(trial.params.items())))
        self._asked[proposal.hint] = trial.number
        return proposal

    def _families_by_score(self, journal: Journal) -> list[str]:
        best: dict[str, float] = {}
        for node in journal.eligible_nodes:
            family = _family(node)
            if family is not None and node.metric is not None:
                best[family] = max(best.get(family, -math.inf), node.metric)
        ranked = sorted(best, key=lambda f: -best[f])
        return ranked or ["lgbm"]

    def _study(self, family: str) -> optuna.Study:
        if family not in self._studies:
            index = list(FAMILIES).index(family)
            sampler = optuna.samplers.TPESampler(seed=self.seed * 101 + index,
                                                 n_startup_trials=5, constant_liar=True)
            self._studies[family] = optuna.create_study(direction="maximize", sampler=sampler)
        return self._studies[family]

    # ---- what happened ---------------------------------------------------------------------

    def observe(self, node: Node) -> None:
        """Record a finished node once: portfolio progress, and every engine node of a family
        as a finished trial of that family's study."""
        if node.node_id in self._seen:
            return
        self._seen.add(node.node_id)
        if node.operator is Operator.ENSEMBLE and node.hint:
            self._last_ensemble = frozenset(node.hint.split(","))
        if node.operator is Operator.PORTFOLIO:
            self._done_portfolio.add(Proposal.of(node).idea)
        family = _family(node)
        if family is None or (node.status in _GONE and node.hint not in self._asked):
            return
        params = BASELINE_PARAMS if node.operator is Operator.BASELINE else \
            Proposal.of(node).param_dict
        study = self._study(family)
        value = node.metric if node.is_ok else None
        number = self._asked.pop(node.hint, None)
        if number is not None:
            if value is None:
                study.tell(number, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(number, value)
            return
        # Params outside the space (a family's space changed since) make no trial.
        with contextlib.suppress(ValueError):
            study.add_trial(optuna.trial.create_trial(
                params=params, distributions=distributions(FAMILIES[family].space),
                value=value,
                state=optuna.trial.TrialState.COMPLETE if value is not None
                else optuna.trial.TrialState.FAIL))


def _family(node: Node) -> str | None:
    if node.operator is Operator.BASELINE:
        return "lgbm"
    if node.operator in (Operator.PORTFOLIO, Operator.TUNE):
        family = Proposal.of(node).family
        return family if family in FAMILIES else None
    return None


def describe(proposal: Proposal) -> str:
    """A node's plan: what the engine ran."""
    family = FAMILIES[proposal.family].description
    what = "portfolio configuration" if proposal.operator is Operator.PORTFOLIO else \
        "Optuna trial"
    return f"{what} {proposal.idea}: {family} with {json.dumps(proposal.param_dict)}"
