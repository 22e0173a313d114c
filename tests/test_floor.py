"""The floor: the engine's own work for idle executors, decided without any LLM; the real
Optuna asks and is told; a resumed floor continues from the Journal."""

from __future__ import annotations

import json
from dataclasses import replace

import optuna

from search.families import BASELINE_FAMILY, BASELINE_PARAMS, FAMILIES, PORTFOLIO
from search.floor import Floor, distributions, ensemble_candidates
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
    # A rebuilt floor (a resumed run) keeps the rhythm: two trials are in the Journal after
    # the six, so the next is the runner-up's; one more in flight moves it on.
    for step in (6, 7):
        proposal = floor.propose(journal, {}, executor_free=True)
        assert proposal is not None
        journal.add(finished(proposal, f"t{step}", 100 + step, 0.7))
    rebuilt = Floor(seed=1, portfolio=False, ensembles=False)
    assert getattr(rebuilt.propose(journal, {}, executor_free=True), "family", "") == "knn"
    busy = {(Operator.TUNE, None): 1}
    assert getattr(rebuilt.propose(journal, busy, executor_free=True), "family",
                   "") == "extra_trees"


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


def test_baseline_params_lie_in_their_familys_space() -> None:
    space = distributions(FAMILIES[BASELINE_FAMILY].space)
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


# ---- feature sets: kept feature programs in the floor's studies (issue 42) ------------------

def _program(node_id: str, reference: Node, step: int, metric: float, *,
             kept: bool = True, parent_set: str = "") -> Node:
    """A features node that extended `parent_set`, paired with `reference` (its configuration
    is the reference's), kept or not by its gate."""
    from search.floor import configuration
    from search.programs import Gate

    config = configuration(reference)
    proposal = Proposal(Operator.FEATURES, parent_set or None, 0.0, idea=reference.node_id,
                        family=config.family, params=config.params)
    gains = (0.01, 0.02, 0.01, 0.03) if kept else (-0.01, 0.02, -0.01, 0.0)
    gate = Gate(reference.node_id, gains, kept, "kept" if kept else "not kept")
    return replace(make_node(node_id, parent_set or None, operator=Operator.FEATURES,
                             metric=metric, step=step), hint=proposal.hint,
                   feature_set=node_id, gate=gate.to_json())


def _trial_node(proposal: Proposal, node_id: str, step: int, metric: float | None) -> Node:
    """A trial as the step records it: on the feature set its proposal names."""
    return replace(finished(proposal, node_id, step, metric), feature_set=proposal.feature_set)


def _raw_journal() -> Journal:
    """The baseline (lgbm) and an extra_trees configuration, on the columns as they are."""
    base = Node(node_id="base", parent_id=None, operator=Operator.BASELINE, status=Status.OK,
                step=0, metric=0.5, metric_raw=0.5)
    name, family, params = next(c for c in PORTFOLIO if c[1] == "extra_trees")
    portfolio = Proposal(Operator.PORTFOLIO, None, 0.0, idea=name, family=family,
                         params=tuple(sorted(params.items())))
    return Journal([base, finished(portfolio, "et", 1, 0.45)])


def test_a_kept_program_is_the_first_trial_of_its_sets_study_and_trials_train_on_it() -> None:
    from search.floor import study_key

    journal = _raw_journal()
    kept = _program("f", journal.get("base"), 2, 0.6)
    rejected = _program("g", journal.get("base"), 3, 0.7, kept=False)
    journal.add(kept)
    journal.add(rejected)
    assert study_key(journal.get("base")) == "lgbm" and study_key(kept) == "lgbm@f"
    assert study_key(rejected) is None  # its columns reach no later trial
    floor = Floor(seed=0, portfolio=False, ensembles=False)
    keys = []
    for step in range(3):
        proposal = floor.propose(journal, {}, executor_free=True)
        assert proposal is not None and proposal.operator is Operator.TUNE
        assert proposal.feature_set == "f"  # the best kept set, not the raw columns
        assert Proposal.from_hint(Operator.TUNE, None, 0.0, proposal.hint) == proposal
        node = _trial_node(proposal, f"t{step}", 10 + step, 0.55)
        keys.append(study_key(node))
        assert proposal.idea.startswith(f"{keys[-1]} trial ")
        journal.add(node)
    assert keys == ["lgbm@f", "lgbm@f", "extra_trees@f"]  # the runner-up's third
    floor.propose(journal, {}, executor_free=False)
    # Each study on the set starts from its family's trials on the parent set (the raw
    # columns): TPE's first asks are not random.
    lgbm = floor._study("lgbm@f").trials
    assert [t.value for t in lgbm] == [0.5, 0.6, 0.55, 0.55]  # base, the program, 2 trials
    assert lgbm[0].params == BASELINE_PARAMS and lgbm[1].params == BASELINE_PARAMS
    assert [t.value for t in floor._study("extra_trees@f").trials] == [0.45, 0.55]
    assert [t.value for t in floor._study("lgbm").trials] == [0.5]  # the raw study: its own


def test_trials_follow_the_best_kept_set_and_a_set_on_a_set_starts_from_its_parents() -> None:
    journal = _raw_journal()
    journal.add(_program("f", journal.get("base"), 2, 0.6))
    floor = Floor(seed=0, portfolio=False, ensembles=False)
    proposal = floor.propose(journal, {}, executor_free=True)
    assert proposal is not None
    journal.add(_trial_node(proposal, "t0", 3, 0.65))
    journal.add(_program("f2", journal.get("t0"), 4, 0.7, parent_set="f"))
    proposal = floor.propose(journal, {}, executor_free=True)
    assert proposal is not None and (proposal.family, proposal.feature_set) == ("lgbm", "f2")
    # raw lgbm (base), then lgbm on f (the program f, t0), then f2 itself
    assert [t.value for t in floor._study("lgbm@f2").trials
            if t.state is optuna.trial.TrialState.COMPLETE] == [0.5, 0.6, 0.65, 0.7]


def test_a_resumed_floor_rebuilds_the_studies_on_feature_sets() -> None:
    journal = _raw_journal()
    journal.add(_program("f", journal.get("base"), 2, 0.6))
    floor = Floor(seed=3, portfolio=False, ensembles=False)
    for step in range(6):  # then its next trial is of the best study, as a fresh floor's
        proposal = floor.propose(journal, {}, executor_free=True)
        assert proposal is not None
        journal.add(_trial_node(proposal, f"t{step}", 10 + step, 0.6 + 0.01 * step))
    floor.propose(journal, {}, executor_free=False)
    proposal = floor.propose(journal, {}, executor_free=True)  # the next: on the set
    assert proposal is not None and proposal.feature_set == "f"
    rebuilt = Floor(seed=3, portfolio=False, ensembles=False)
    again = rebuilt.propose(journal, {}, executor_free=True)
    assert again is not None and again.feature_set == "f" and again.family == proposal.family

    def trials(f: Floor, key: str) -> list[tuple[dict[str, object], float | None]]:
        return [(t.params, t.value) for t in f._study(key).trials
                if t.state is optuna.trial.TrialState.COMPLETE]

    for key in ("lgbm@f", "extra_trees@f"):
        assert trials(rebuilt, key) == trials(floor, key) and len(trials(floor, key)) >= 2
    assert rebuilt._ranked(journal) == floor._ranked(journal)


def test_ensemble_candidates_count_each_feature_sets_study_apart() -> None:
    from search.floor import PER_STUDY

    journal = _raw_journal()
    harnessed = "# ---- model code (written by the LLM) ----\n"
    journal.add(replace(_program("f", journal.get("base"), 2, 0.6), code=harnessed))
    proposal = Proposal(Operator.TUNE, None, 0.0, idea="t", family="lgbm",
                        params=tuple(sorted(BASELINE_PARAMS.items())))
    for i in range(6):
        for feature_set in ("", "f"):
            node = _trial_node(replace(proposal, feature_set=feature_set), f"t{feature_set}{i}",
                               10 + i, 0.9 - 0.01 * i)
            journal.add(node)
    ids = [n.node_id for n in ensemble_candidates(journal)]
    assert ids[:2 * PER_STUDY] == [f"t{s}{i}" for i in range(PER_STUDY) for s in ("", "f")]
    assert not {"t4", "tf4", "f"} & set(ids)  # a fifth of either study: the program is one


def test_an_llm_written_nodes_trials_stay_its_own_beside_a_kept_set() -> None:
    journal = _raw_journal()
    journal.add(_program("f", journal.get("base"), 2, 0.6))
    journal.add(replace(make_node("llm", metric=0.95, step=3,
                                  code="# ---- model code (written by the LLM) ----\n"),
                        params=json.dumps({"n_estimators": 200})))
    floor = Floor(seed=0, portfolio=False, ensembles=False)
    assert floor._ranked(journal)[:2] == ["node:llm", "lgbm@f"]
    proposal = floor.propose(journal, {}, executor_free=True)
    assert proposal is not None and proposal.parent_id == "llm"
    assert proposal.family == "" and proposal.feature_set == ""  # its own code, as it is
