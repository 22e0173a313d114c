"""The floor: the engine's own work for idle executors, decided without any LLM; the real
Optuna asks and is told; a resumed floor continues from the Journal."""

from __future__ import annotations

import json
from dataclasses import replace

import optuna

from search.families import FAMILIES, PORTFOLIO
from search.floor import BASELINE_PARAMS, Floor, distributions, ensemble_candidates
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal
from tests.helpers import make_node


def finished(proposal: Proposal, node_id: str, step: int, metric: float | None) -> Node:
    return Node(node_id=node_id, parent_id=proposal.parent_id, operator=proposal.operator,
                status=Status.OK if metric is not None else Status.BUGGY, step=step,
                hint=proposal.hint, metric=metric, metric_raw=metric,
                code="# ---- model code (written by the LLM) ----\n" + node_id)


def test_portfolio_first_then_trials_of_the_best_family() -> None:
    floor, journal = Floor(seed=0, ensembles=False), Journal()
    names = []
    for step in range(len(PORTFOLIO)):
        proposal = floor.propose(journal, {}, executor_free=True)
        assert proposal is not None and proposal.operator is Operator.PORTFOLIO
        names.append(proposal.idea)
        # extra_trees does best: the trials go to it, with one in three for the runner-up
        score = {"extra_trees": 0.9, "knn": 0.8}.get(proposal.idea, 0.5)
        journal.add(finished(proposal, f"p{step}", step, score))
    assert names == [name for name, _, _ in PORTFOLIO]
    trials = []
    for step in range(6):
        proposal = floor.propose(journal, {}, executor_free=True)
        assert proposal is not None and proposal.operator is Operator.TUNE
        trials.append(proposal.family)
        assert set(proposal.param_dict) == {d[0] for d in FAMILIES[proposal.family].space}
        journal.add(finished(proposal, f"t{step}", 100 + step, 0.7))
    assert trials == ["extra_trees", "extra_trees", "knn"] * 2


def test_retrieved_cases_run_as_stored_before_the_portfolio_and_are_then_tuned() -> None:
    floor, journal = Floor(seed=0, cases=("c1", "c2"), ensembles=False), Journal()
    first = [floor.propose(journal, {}, executor_free=True) for _ in range(3)]
    assert [(p.operator, p.idea) for p in first if p is not None] == [
        (Operator.CASE, "c1"), (Operator.CASE, "c2"), (Operator.PORTFOLIO, PORTFOLIO[0][0])]
    assert first[0] is not None and Proposal.of(finished(first[0], "n", 1, 1.0)) == first[0]
    # A rebuilt floor (a resumed run) runs neither case again; a case with PARAMS that did
    # best is tuned around its own values like any LLM-written node.
    case = replace(finished(first[0], "k1", 1, 0.95), params='{"n_estimators": 200}')
    rebuilt = Floor(seed=0, cases=("c1",), portfolio=False, ensembles=False)
    trial = rebuilt.propose(Journal([case]), {}, executor_free=True)
    assert trial is not None and trial.operator is Operator.TUNE and trial.parent_id == "k1"
    assert 50 <= trial.param_dict["n_estimators"] <= 800


def test_no_executor_no_work_and_nothing_when_turned_off() -> None:
    assert Floor(seed=0).propose(Journal(), {}, executor_free=False) is None
    off = Floor(seed=0, portfolio=False, tuning=False, ensembles=False)
    assert off.propose(Journal(), {}, executor_free=True) is None


def test_optuna_is_told_every_result_and_a_rebuilt_floor_knows_them() -> None:
    floor, journal = Floor(seed=1, portfolio=False, ensembles=False), Journal()
    baseline = Node(node_id="base", parent_id=None, operator=Operator.BASELINE,
                    status=Status.OK, metric=-3.0, metric_raw=3.0)
    journal.add(baseline)
    for step in range(8):
        proposal = floor.propose(journal, {}, executor_free=True)
        assert proposal is not None and proposal.family == "lgbm"
        metric = None if step == 2 else -2.0 - 0.1 * step
        journal.add(finished(proposal, f"t{step}", step + 1, metric))
    floor.propose(journal, {}, executor_free=False)  # the floor reads what finished
    study = floor._study("lgbm")
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 8  # the baseline and 7 trials
    assert states.count(optuna.trial.TrialState.FAIL) == 1
    assert study.best_value == -2.0  # the first trial's
    rebuilt = Floor(seed=1, portfolio=False, ensembles=False)
    rebuilt.propose(journal, {}, executor_free=False)  # reads the Journal
    assert [t.params for t in rebuilt._study("lgbm").trials] == [t.params for t in study.trials]


def test_baseline_params_lie_in_the_lgbm_space() -> None:
    space = distributions(FAMILIES["lgbm"].space)
    assert set(BASELINE_PARAMS) == set(space)
    for name, value in BASELINE_PARAMS.items():
        assert space[name]._contains(space[name].to_internal_repr(value)), name
    for name, family, params in PORTFOLIO:
        space = distributions(FAMILIES[family].space)
        assert set(params) == set(space), name
        assert all(space[k]._contains(space[k].to_internal_repr(v)) for k, v in params.items())


def test_ensembles_come_when_enough_new_candidates_arrived() -> None:
    floor = Floor(seed=0, portfolio=False, tuning=False)
    harnessed = "# ---- model code (written by the LLM) ----\n"
    journal = Journal([make_node("a", metric=0.5, code=harnessed)])
    assert floor.propose(journal, {}, executor_free=False) is None  # one candidate only
    journal.add(make_node("b", metric=0.7, step=1, code=harnessed))
    first = floor.propose(journal, {}, executor_free=False)
    assert first is not None and first.operator is Operator.ENSEMBLE
    assert first.members == ("b", "a") and first.parent_id == "b"
    journal.add(Node(node_id="e", parent_id="b", operator=Operator.ENSEMBLE,
                     status=Status.OK, hint=first.hint, metric=0.71, step=2))
    for i in range(2):
        journal.add(make_node(f"n{i}", metric=0.6, step=3 + i, code=harnessed))
        assert floor.propose(journal, {}, executor_free=False) is None
    journal.add(make_node("n2", metric=0.6, step=5, code=harnessed))
    assert floor.propose(journal, {}, executor_free=False) is not None  # 3 new since
    whole_script = make_node("w", metric=0.9, step=6, code="import pandas\n")
    journal.add(whole_script)
    assert "w" not in {n.node_id for n in ensemble_candidates(journal)}  # no model code


def test_a_requeued_trial_from_an_earlier_start_is_a_plain_result() -> None:
    proposal = Proposal(Operator.TUNE, None, 0.0, idea="lgbm trial 9", family="lgbm",
                        params=tuple(sorted(BASELINE_PARAMS.items())))
    assert json.loads(proposal.hint)["family"] == "lgbm"
    assert Proposal.from_hint(Operator.TUNE, None, 0.0, proposal.hint) == proposal
    floor = Floor(seed=0, portfolio=False)
    floor.observe(finished(proposal, "late", 0, 0.4))
    assert [t.value for t in floor._study("lgbm").trials] == [0.4]


def test_an_llm_node_with_params_is_tuned_around_its_own_values() -> None:
    from search.floor import node_params, space_around

    params = {"n_estimators": 200, "learning_rate": 0.05, "max_depth": 1, "loss": "huber",
              "verbose": False, "alpha": 2.5}
    space = space_around(params)
    assert set(space) == {"n_estimators", "learning_rate", "alpha"}  # 1, str, bool stay fixed
    assert (space["n_estimators"].low, space["n_estimators"].high) == (50, 800)
    assert space["learning_rate"].high == 0.1 and space["alpha"].high == 10.0
    llm = Node(node_id="llm", parent_id=None, operator=Operator.IMPROVE, status=Status.OK,
               metric=0.95, metric_raw=0.95, params=json.dumps(params),
               code="# ---- model code (written by the LLM) ----\n")
    assert node_params(llm) == params
    floor = Floor(seed=0, portfolio=False, ensembles=False)
    journal = Journal([Node(node_id="base", parent_id=None, operator=Operator.BASELINE,
                            status=Status.OK, metric=0.5, metric_raw=0.5), llm])
    proposal = floor.propose(journal, {}, executor_free=True)
    assert proposal is not None and proposal.operator is Operator.TUNE
    assert proposal.parent_id == "llm" and proposal.family == ""  # it beats the lgbm family
    assert set(proposal.param_dict) == {"n_estimators", "learning_rate", "alpha"}
    assert Proposal.from_hint(Operator.TUNE, "llm", 0.0, proposal.hint) == proposal
    journal.add(Node(node_id="trial", parent_id="llm", operator=Operator.TUNE,
                     status=Status.OK, hint=proposal.hint, metric=0.97, metric_raw=0.97,
                     step=2))
    floor.propose(journal, {}, executor_free=False)
    assert [t.value for t in floor._study("node:llm").trials] == [0.95, 0.97]


def _family_node(family: str, node_id: str, step: int, metric: float) -> Node:
    params = {d[0]: p for d, p in zip(FAMILIES[family].space, [1.0] * 8, strict=False)}
    proposal = Proposal(Operator.TUNE, None, 0.0, idea=f"{family} trial {step}", family=family,
                        params=tuple(sorted(params.items())))
    return finished(proposal, node_id, step, metric)


def test_a_stalled_study_goes_behind_the_others() -> None:
    # linear (one dimension: patience 10) is best, then tried 10 times without doing better
    nodes = [_family_node("linear", "lin", 0, 0.9), _family_node("knn", "knn", 1, 0.6),
             Node(node_id="base", parent_id=None, operator=Operator.BASELINE,
                  status=Status.OK, step=2, metric=0.5, metric_raw=0.5)]
    nodes += [_family_node("linear", f"lin{i}", 3 + i, 0.8) for i in range(9)]
    floor = Floor(seed=0, portfolio=False, ensembles=False)
    journal = Journal(nodes)
    floor.propose(journal, {}, executor_free=False)
    assert floor._ranked(journal) == ["linear", "knn", "lgbm"]  # 9 trials since its best
    journal.add(_family_node("linear", "lin9", 12, 0.8))
    assert floor._ranked(journal) == ["knn", "lgbm", "linear"]  # 10: stalled
    journal.add(_family_node("linear", "lin10", 13, 0.95))  # a better one: going again
    assert floor._ranked(journal)[0] == "linear"


def test_ensemble_candidates_hold_at_most_four_trials_of_one_study() -> None:
    from search.floor import PER_STUDY

    nodes = [_family_node("lgbm", f"g{i}", i, 0.9 - 0.01 * i) for i in range(10)]
    nodes += [_family_node("extra_trees", "et", 10, 0.5),
              make_node("llm", metric=0.4, step=11,
                        code="# ---- model code (written by the LLM) ----\n")]
    ids = [n.node_id for n in ensemble_candidates(Journal(nodes))]
    assert ids == [f"g{i}" for i in range(PER_STUDY)] + ["et", "llm"]
