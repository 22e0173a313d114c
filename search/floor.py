"""The engine's own work, which needs no LLM call: the floor under the LLM's ideas (issue 25).

On 2 cores the executor sat idle 89 % of a run while the LLM thought. Whenever an executor has
nothing LLM-written to run, the loop asks the floor:

0. the retrieved cases (--memory), each run as stored: other tasks' working code, which names
   no column and so runs here as it is, with no LLM call (a case that is a family's
   configuration sized down, or left out, as the portfolio's are). Greedy's recall (the LLM's
   adaptation, a separate node) waits for them and adapts the one that did best here;
1. the portfolio (`search.families.PORTFOLIO`): fixed, diverse configurations, cheapest first;
2. then Optuna trials, asked and told here (the driver), run by the executors: TPE over the
   hyperparameters of what does best so far, two trials of the best for one of the runner-up.
   A study whose last `patience` trials (5 per dimension of its space, at least 10) found
   nothing better than its best has stalled and goes behind those that have not: a
   one-dimensional linear model otherwise took two thirds of a run's trials on credit-g.
   What is tuned: a model family on a feature set (every node of a family, the baseline root
   and the portfolio included, is a trial of that family's study on the columns as they are,
   so the sampler starts from what the portfolio found; a kept feature program is the first
   trial of its set's study for its family, and a family's trials train on the best kept set,
   search/programs.py), or an LLM-written node whose code keeps its hyperparameters in one
   literal `PARAMS` dict (its study varies each number around the node's own value; the node
   is its first trial, and each trial is its code with only that dict changed, a child of the
   node).

And, with no executor at all, ensemble selection (`engine/evaluation/blend.py`) over the best nodes'
kept predictions, whenever at least `ensemble_every` new candidates arrived since the last one. The
candidates are the best nodes with at most `PER_STUDY` of each study: otherwise eighty trials of one
family fill every place and the blend has nothing different to combine.
Everything but which trials are in flight is rebuilt from the Journal, so a resumed run goes
on with the same studies; trials in flight at a kill come back as plain results.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from search.families import (
    BASELINE_FAMILY,
    BASELINE_PARAMS,
    FAMILIES,
    PORTFOLIO,
    Dimension,
    Scale,
    affordable,
    affordable_space,
    sized,
)
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import InFlightKey, Proposal, in_flight_of
from search.programs import best_feature_set, is_kept, program_temperature

ENSEMBLE_CANDIDATES = 20  # the best eligible nodes ensemble selection chooses among
PER_STUDY = 4  # of them at most this many trials of one study (see the module docstring)
STALL_PER_DIMENSION, STALL_MIN = 5, 10  # a study's patience: trials without a better one
# How far a trial of an LLM-written node moves each number: down to a quarter, up to four
# times (fractions in (0, 1) at most to 1, twice their value).
SPREAD = 4.0
# A column's kind is a question of fact: the likeliest answer, not a sample.
QUESTION_TEMPERATURE = 0.0
_GONE = (Status.LOST, Status.KILLED)
Distributions = dict[str, optuna.distributions.BaseDistribution]


def distributions(space: tuple[Dimension, ...]) -> Distributions:
    out: Distributions = {}
    for name, kind, low, high in space:
        if kind == "categorical":
            out[name] = optuna.distributions.CategoricalDistribution(list(low))
        elif kind.endswith("int"):
            out[name] = optuna.distributions.IntDistribution(low, high, log=kind == "log_int")
        else:
            out[name] = optuna.distributions.FloatDistribution(low, high,
                                                               log=kind == "log_float")
    return out


def space_around(params: Mapping[str, Any]) -> Distributions:
    """A search space around an LLM-written node's own PARAMS: each positive number varies
    on a log scale around its value; 0, 1, negatives, booleans and strings stay as they are
    (a 0/1 is often a switch, not a quantity)."""
    out: Distributions = {}
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            continue
        if isinstance(value, int):
            if value >= 2:
                out[name] = optuna.distributions.IntDistribution(
                    max(1, int(value / SPREAD)), int(value * SPREAD), log=True)
        elif value < 1:
            out[name] = optuna.distributions.FloatDistribution(
                value / SPREAD, min(1.0, 2 * value), log=True)
        else:
            out[name] = optuna.distributions.FloatDistribution(
                value / SPREAD, value * SPREAD, log=True)
    return out


def node_params(node: Node) -> dict[str, Any]:
    """The PARAMS dict a node's code holds (recorded by the step), {} when none."""
    try:
        data = json.loads(node.params) if node.params else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def configuration(node: Node) -> Proposal:
    """The proposal that produced a node, with the baseline root's fixed configuration (it is
    stored with an empty hint) filled in."""
    if node.operator.traits.reference:
        return Proposal(node.operator, node.parent_id, node.temperature,
                        family=BASELINE_FAMILY, params=tuple(sorted(BASELINE_PARAMS.items())))
    return Proposal.of(node)


def reference(journal: Journal, feature_set: str) -> Node | None:
    """The floor's best configuration on a feature set ("" the columns as they are): what a
    feature program extending that set is paired with."""
    return max((n for n in journal.eligible_nodes
                if n.operator.traits.configured and n.feature_set == feature_set
                and configuration(n).family in FAMILIES),
               key=lambda n: (n.metric or 0.0, -n.step), default=None)


def program_proposal(journal: Journal, temperature: float, feature_set: str | None = None, *,
                     questions: Sequence[str] = (),
                     in_flight: Mapping[InFlightKey, int] | None = None) -> Proposal | None:
    """A feature program extending `feature_set` (default: the best kept one), paired with
    the floor's best configuration on it, sampled at `temperature` widened by the refusals
    in a row before it; None until a configuration on it has been scored. The kinds of the
    text columns in `questions` are asked first (`column_question`)."""
    asked = column_question(journal, questions, in_flight or {})
    if asked is not None:
        return asked
    if feature_set is None:
        feature_set = best_feature_set(journal)
    paired = reference(journal, feature_set)
    if paired is None:
        return None
    config = configuration(paired)
    return Proposal(Operator.FEATURES, feature_set or None,
                    program_temperature(journal, temperature), idea=paired.node_id,
                    family=config.family, params=config.params)


def column_question(journal: Journal, questions: Sequence[str],
                    in_flight: Mapping[InFlightKey, int]) -> Proposal | None:
    """The next text column whose kind the LLM is asked (operators/column_kinds.py): each of
    `questions` once a run, in their order, on the columns as they are and paired with the
    floor's best configuration there, before any program the LLM writes itself; None once
    each is answered or being asked. Until the last is asked every feature program in flight
    on the columns as they are is a question, and those are the first columns not answered
    yet (a lost one is asked again, first: the loop proposes it again before anything new)."""
    if not questions:
        return None
    answered = {Proposal.of(n).column for n in journal.nodes_of(Operator.FEATURES)
                if n.status is not Status.LOST}
    left = [column for column in questions if column not in answered]
    asking = in_flight.get((Operator.FEATURES, None), 0)
    paired = reference(journal, "")
    if len(left) <= asking or paired is None:
        return None
    config = configuration(paired)
    return Proposal(Operator.FEATURES, None, QUESTION_TEMPERATURE, idea=paired.node_id,
                    family=config.family, params=config.params, column=left[asking])


def family_study(family: str, feature_set: str) -> str:
    """The key of a family's study on a feature set: `lgbm` on the columns as they are,
    `lgbm@<set id>` on a kept feature set."""
    return f"{family}@{feature_set}" if feature_set else family


def study_family(key: str) -> tuple[str, str]:
    """A study key's model family and feature set; ("", "") for an LLM-written node's."""
    family, _, feature_set = key.partition("@")
    return (family, feature_set) if family in FAMILIES else ("", "")


def study_key(node: Node) -> str | None:
    """The study a node is a trial of: its family's on its feature set, or its LLM-written
    parent's (or its own, when its code exposes tunable PARAMS); None for any other node. A
    feature program is a trial only once kept (its set's first): one that was not kept trained
    on columns no later trial gets."""
    traits = node.operator.traits
    family = configuration(node).family
    if traits.program:
        return family_study(family, node.feature_set) \
            if family in FAMILIES and is_kept(node) else None
    if family:
        return family_study(family, node.feature_set) if family in FAMILIES else None
    if traits.configured and node.parent_id is not None:  # a trial of an LLM-written node
        return f"node:{node.parent_id}"
    if traits.tunable:
        return f"node:{node.node_id}" if space_around(node_params(node)) else None
    return None


def ensemble_candidates(journal: Journal) -> list[Node]:
    """The best eligible scored nodes whose code has model code to combine, best first, at
    most `PER_STUDY` of one study (a node of none is its own)."""
    nodes = sorted((n for n in journal.eligible_nodes
                    if not n.operator.traits.combines and n.has_model_code),
                   key=lambda n: (-(n.metric or 0.0), n.step))
    taken: dict[str, int] = {}
    out: list[Node] = []
    for node in nodes:
        key = study_key(node) or node.node_id
        if taken.get(key, 0) < PER_STUDY:
            taken[key] = taken.get(key, 0) + 1
            out.append(node)
            if len(out) == ENSEMBLE_CANDIDATES:
                break
    return out


class Floor:
    """Proposes the engine's own nodes; it reads every finished node from the Journal."""

    def __init__(self, seed: int = 0, *, cases: tuple[str, ...] = (),
                 configurations: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
                 portfolio: bool = True, tuning: bool = True, ensembles: bool = True,
                 ensemble_every: int = 3, scale: Scale | None = None) -> None:
        self.seed = seed
        # what a node may cost on this run's data and budget (None: no limit); a configuration
        # that costs more is sized down (fewer trees) or not run (search.families.sized)
        self.scale = scale
        # The retrieved cases it runs as stored, before the portfolio. One that is a family's
        # configuration (`configurations`: its family and params) is sized as the portfolio's
        # are, or left out (a case fitted on small data timed out at 2 GB,
        # benchmarks/results/big-data-2026-12-07c); `_sized_cases`: the params sized down of
        # each configuration that fits.
        configurations = configurations or {}
        self._sized_cases: dict[str, tuple[tuple[str, Any], ...]] = {}
        for case_id, (family, params) in configurations.items():
            fitting = sized(family, params, scale)
            if fitting is not None:
                self._sized_cases[case_id] = tuple(sorted(
                    (k, v) for k, v in fitting.items() if params.get(k) != v))
        self.cases = tuple(c for c in cases if c not in configurations or c in self._sized_cases)
        self.portfolio = portfolio
        self.tuning = tuning
        self.ensembles = ensembles
        self.ensemble_every = ensemble_every
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._studies: dict[str, optuna.Study] = {}  # by study key (see study_key)
        # each kept feature set's parent set ("" the columns as they are), for warm starts
        self._parent_set: dict[str, str] = {}
        self._spaces: dict[str, Distributions] = {}
        self._asked: dict[str, int] = {}  # hint of a trial in flight -> its trial number
        # portfolio configurations (by name) and cases run as stored (by id): each runs once
        self._run_once: set[str] = set()
        self._seen: set[str] = set()
        self._last_ensemble: frozenset[str] = frozenset()

    # ---- what to run -----------------------------------------------------------------------

    def propose(self, journal: Journal, in_flight: Mapping[InFlightKey, int], *,
                executor_free: bool) -> Proposal | None:
        for node in journal:
            self.observe(node)
        ensemble = self._ensemble(journal, in_flight)
        if ensemble is not None or not executor_free:
            return ensemble
        for case_id in self.cases:
            if case_id not in self._run_once:
                self._run_once.add(case_id)
                return Proposal(Operator.CASE, None, 0.0, idea=case_id,
                                params=self._sized_cases.get(case_id, ()))
        if self.portfolio:
            for name, family, params in PORTFOLIO:
                if name not in self._run_once:
                    self._run_once.add(name)  # in flight now; a loss is not retried
                    fitting = sized(family, params, self.scale)
                    if fitting is None:  # too slow for this run even with fewer trees
                        continue
                    return Proposal(Operator.PORTFOLIO, None, 0.0, idea=name, family=family,
                                    params=tuple(sorted(fitting.items())))
        if self.tuning:
            return self._trial(journal, in_flight)
        return None

    def _ensemble(self, journal: Journal,
                  in_flight: Mapping[InFlightKey, int]) -> Proposal | None:
        if not self.ensembles or any(op.traits.combines for op, _ in in_flight):
            return None
        best = ensemble_candidates(journal)
        ids = frozenset(n.node_id for n in best)
        new = len(ids - self._last_ensemble)
        if len(ids) < 2 or new < (2 if not self._last_ensemble else self.ensemble_every):
            return None
        self._last_ensemble = ids
        return Proposal(Operator.ENSEMBLE, best[0].node_id, 0.0,
                        members=tuple(n.node_id for n in best))

    def _trial(self, journal: Journal, in_flight: Mapping[InFlightKey, int]) -> Proposal | None:
        ranked = self._ranked(journal)
        # Counted from the Journal and the work in flight, so a resumed run keeps the rhythm.
        trials = len(journal.nodes_of(Operator.TUNE)) + in_flight_of(in_flight, Operator.TUNE)
        key = ranked[1] if trials % 3 == 2 and len(ranked) > 1 else ranked[0]
        study = self._study(key)
        trial = study.ask(self._spaces[key])
        params = tuple(sorted(trial.params.items()))
        family, feature_set = study_family(key)
        if family:
            fitting = sized(family, trial.params, self.scale)
            if fitting is None:  # its space fits the run's scale, this corner of it does not
                study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
                return None
            params = tuple(sorted(fitting.items()))
            proposal = Proposal(Operator.TUNE, None, 0.0, idea=f"{key} trial {trial.number}",
                                family=family, params=params, feature_set=feature_set)
        else:  # a node: its code with new PARAMS values, a child of it
            parent = key.removeprefix("node:")
            proposal = Proposal(Operator.TUNE, parent, 0.0,
                                idea=f"node {parent} trial {trial.number}", params=params)
        self._asked[proposal.hint] = trial.number
        return proposal

    def _ranked(self, journal: Journal) -> list[str]:
        """The studies to ask a trial of, best first by the best score of their nodes (the
        baseline's family when none ran), the stalled ones behind the others. A family's
        trials train on the best kept feature set: a family with no trial on it yet ranks there
        by its best score on an earlier set (its study there starts from those trials, not
        stalled)."""
        best: dict[str, float] = {}
        since_best: dict[str, int] = {}  # scored trials after the study's best one
        for node in sorted(journal.eligible_nodes, key=lambda n: n.step):
            key = study_key(node)
            if key is None or node.metric is None:
                continue
            if node.metric > best.get(key, -math.inf):
                best[key], since_best[key] = node.metric, 0
            else:
                since_best[key] += 1

        def stalled(key: str) -> bool:
            dimensions = len(self._spaces.get(key, ()))
            return since_best[key] >= max(STALL_MIN, STALL_PER_DIMENSION * dimensions)

        current = best_feature_set(journal)
        rank: dict[str, tuple[bool, float]] = {}  # study -> (stalled, minus its best score)
        for key in best:
            family, feature_set = study_family(key)
            if family and not affordable(family, self.scale):
                continue
            if not family or feature_set == current:
                rank[key] = (stalled(key), -best[key])
                continue
            target = family_study(family, current)
            if target not in best:
                rank[target] = min(rank.get(target, (False, math.inf)), (False, -best[key]))
        ranked = sorted(rank, key=lambda k: rank[k])
        return ranked or [BASELINE_FAMILY]

    def _study(self, key: str) -> optuna.Study:
        if key not in self._studies:
            sampler = optuna.samplers.TPESampler(seed=self.seed * 101 + len(self._studies),
                                                 n_startup_trials=5, constant_liar=True)
            study = optuna.create_study(direction="maximize", sampler=sampler)
            family, feature_set = study_family(key)
            if family:
                self._spaces[key] = distributions(affordable_space(family, self.scale))
                # A kept program adds a few columns to its parent set: the hyperparameters
                # that did well there are the best first guess here. Without them TPE would
                # spend its first 5 trials on random points, a large part of a short run.
                study.add_trials(self._warm_start(family, feature_set))
            self._studies[key] = study
        return self._studies[key]

    def _warm_start(self, family: str, feature_set: str) -> list[optuna.trial.FrozenTrial]:
        """The completed trials of `family` on the nearest set under `feature_set` that has
        some (its parent set first, the columns as they are last); [] on the raw columns."""
        while feature_set:
            feature_set = self._parent_set.get(feature_set, "")
            parent = self._studies.get(family_study(family, feature_set))
            trials = [t for t in parent.trials if t.state is optuna.trial.TrialState.COMPLETE] \
                if parent is not None else []
            if trials:
                return trials
        return []

    # ---- what happened ---------------------------------------------------------------------

    def observe(self, node: Node) -> None:
        """Record a finished node once: portfolio progress, and every node that is a trial of
        a study (family or LLM-written node) as a finished trial of it."""
        if node.node_id in self._seen:
            return
        self._seen.add(node.node_id)
        traits = node.operator.traits
        if traits.combines and node.hint:
            self._last_ensemble = frozenset(node.hint.split(","))
        if traits.run_once:
            self._run_once.add(Proposal.of(node).idea)
        if traits.program and is_kept(node):
            self._parent_set[node.node_id] = node.parent_id or ""
        key = study_key(node)
        if key is None or (node.status in _GONE and node.hint not in self._asked):
            return
        if not study_family(key)[0] and key not in self._spaces:
            if not node.is_ok or key != f"node:{node.node_id}":
                return  # only a working LLM-written node opens a study, its own
            self._spaces[key] = space_around(node_params(node))  # around its own PARAMS
        study = self._study(key)
        params = configuration(node).param_dict if traits.configured else node_params(node)
        value = node.metric if node.is_ok else None
        number = self._asked.pop(node.hint, None)
        if number is not None:
            if value is None:
                study.tell(number, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(number, value)
            return
        space = self._spaces[key]
        # Params outside the space (a family's space changed since) make no trial.
        with contextlib.suppress(ValueError):
            study.add_trial(optuna.trial.create_trial(
                params={k: params[k] for k in space if k in params}, distributions=space,
                value=value,
                state=optuna.trial.TrialState.COMPLETE if value is not None
                else optuna.trial.TrialState.FAIL))

