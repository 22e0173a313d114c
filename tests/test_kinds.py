"""The operator registry: every operator has one module, found by name, and what the search
layer knows of an operator (its traits) agrees with what its module does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from operators.context import TaskContext
from operators.kinds import EngineCode, build_prompt, kind_of, registered
from operators.kinds.ensemble import ensemble_written
from search.journal import Journal
from search.node import TRAITS, HintForm, Node, Operator, Status
from search.policy import Proposal
from tests.helpers import make_node

CTX = TaskContext(preview="Predict strength.", target="strength", task_type="regression",
                  metric="rmse", maximize=False)
MODEL = ("PARAMS = {'alpha': 1.0}\n\n\ndef fit_predict(X, y, X_valid, X_test):\n"
         "    return X_valid.a, X_test.a\n")


def test_every_operator_has_a_registered_module_and_traits() -> None:
    assert registered() == list(Operator)
    assert set(TRAITS) == set(Operator)
    for operator in Operator:
        assert kind_of(operator).operator is operator
        assert kind_of(operator.value) is kind_of(operator)  # by name, one instance


def test_an_unknown_operator_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"no operator module registered for 'stacking'; "
                                         r"registered: analyze, baseline, case, debug"):
        kind_of("stacking")


def test_engine_written_kinds_write_code_and_the_others_ask_the_llm() -> None:
    from operators.harness import assemble

    parent = make_node("p", code=assemble(CTX, MODEL))
    journal = Journal([parent])
    proposals = {
        Operator.BASELINE: Proposal(Operator.BASELINE),
        Operator.PORTFOLIO: Proposal(Operator.PORTFOLIO, idea="et", family="extra_trees",
                                     params=(("n_estimators", 100),)),
        Operator.TUNE: Proposal(Operator.TUNE, "p", 0.0, params=(("alpha", 0.5),)),
    }
    for operator, proposal in proposals.items():
        assert operator.traits.engine_written
        written = kind_of(operator).engine_code(CTX, proposal, journal)
        assert written.plan and "def fit_predict" in written.code
        # the engine's own model code runs every fold in one process; an LLM's, fold by fold
        assert bool(written.all_folds_code) is (operator is not Operator.TUNE)
        with pytest.raises(ValueError, match="the engine writes its code"):
            build_prompt(CTX, proposal, journal)
    for operator in (Operator.DRAFT, Operator.IMPROVE, Operator.DEBUG, Operator.SELA,
                     Operator.INSIGHTS, Operator.ANALYZE):
        assert not operator.traits.engine_written
        parent_id = "p" if operator in (Operator.IMPROVE, Operator.DEBUG) else None
        prompt = build_prompt(CTX, Proposal(operator, parent_id, stage="model"), journal)
        assert prompt.tag == operator.value
        with pytest.raises(ValueError, match="is not engine-written"):
            kind_of(operator).engine_code(CTX, Proposal(operator), journal)


def test_only_the_kinds_that_reflect_name_a_reflection_and_pin_their_ask() -> None:
    journal = Journal([make_node("p", code=MODEL)])
    improve = Proposal(Operator.IMPROVE, "p")
    assert {op for op in Operator if kind_of(op).reflects} == {Operator.IMPROVE, Operator.DEBUG}
    assert kind_of(Operator.IMPROVE).pinned(improve, journal).idea  # the pool's next idea
    reflection = kind_of(Operator.REFLECT).prompt(CTX, improve, journal)
    assert reflection.tag == "reflect" and "Do not write code" in reflection.messages[-1][
        "content"]
    with pytest.raises(ValueError, match="has no reflection call"):
        kind_of(Operator.DRAFT).reflection_job(CTX, Proposal(Operator.DRAFT), journal)


def test_limits_per_kind() -> None:
    assert kind_of(Operator.DRAFT).seconds(300.0, 60.0) == 300.0
    assert kind_of(Operator.TUNE).seconds(300.0, 60.0) == 60.0  # the floor's cap
    assert kind_of(Operator.CASE).seconds(300.0, None) == 300.0
    assert kind_of(Operator.ANALYZE).seconds(300.0, 60.0) == 120.0


def test_an_ensemble_writes_its_members_best_weight_first() -> None:
    from operators.harness import assemble

    members = [make_node(i, code=assemble(CTX, MODEL.replace("1.0", w)))
               for i, w in (("b", "2.0"), ("a", "3.0"))]
    written = ensemble_written(CTX, members, {"a": 1, "b": 3}, 5)
    assert isinstance(written, EngineCode) and not written.all_folds_code
    assert written.plan == "ensemble selection over 5 nodes: b x3, a x1"
    assert "WEIGHTS = [3, 1]" in written.code


@pytest.mark.parametrize("proposal", [
    Proposal(Operator.ENSEMBLE, "a", 0.0, members=("a", "b")),
    Proposal(Operator.INSIGHTS, stage="model"),
    Proposal(Operator.SELA, path=(0, 2), insights=("x", "y")),
    Proposal(Operator.TUNE, None, 0.0, idea="t1", family="lgbm", params=(("num_leaves", 7),)),
    Proposal(Operator.RECALL, idea="c1"),
])
def test_each_hint_form_reads_back_as_its_proposal(proposal: Proposal) -> None:
    node = Node("n", proposal.parent_id, proposal.operator, Status.OK,
                temperature=proposal.temperature, hint=proposal.hint)
    assert Proposal.of(node) == proposal
    assert {op.traits.hint_form for op in Operator} == set(HintForm)


def test_a_trial_on_a_kept_feature_set_trains_on_the_columns_its_programs_add() -> None:
    """The engine's all-folds code of an Optuna trial on a kept set, run for real: the kept
    program's column makes the regression exact; the same trial on the raw columns is not."""
    import io

    import numpy as np
    import pandas as pd

    from operators.features import feature_programs
    from operators.harness import assemble
    from operators.models import model_code
    from sandbox import Limits, run_script

    ctx = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                      maximize=False)
    square = "def add_features(df):\n    df['x_squared'] = df['x'] ** 2\n    return df\n"
    params = {"alpha": 1e-9}
    kept = make_node("f", operator=Operator.FEATURES,
                     code=assemble(ctx, model_code(ctx, "linear", params, [square], check=True)))
    journal = Journal([replace(kept, feature_set="f")])
    trial = Proposal(Operator.TUNE, None, 0.0, idea="linear@f trial 0", family="linear",
                     params=tuple(params.items()), feature_set="f")
    on_set = kind_of(Operator.TUNE).engine_code(ctx, trial, journal)
    raw = kind_of(Operator.TUNE).engine_code(ctx, replace(trial, feature_set=""), journal)
    assert feature_programs(on_set.code) == feature_programs(on_set.all_folds_code) == [square]
    assert feature_programs(raw.all_folds_code) == [] and "feature set f" in on_set.plan
    x = np.linspace(-3, 3, 20)
    inputs = {"train.csv": pd.DataFrame({"x": x, "y": x**2}).to_csv(index=False).encode(),
              "folds.csv": pd.DataFrame({"fold": np.arange(20) % 2}).to_csv(
                  index=False).encode(),
              "test.csv": b"x\n0.5\n"}

    def out_of_fold(code: str) -> np.ndarray:
        result = run_script(code, inputs, Limits(wall_seconds=60))
        assert result.status == "ok", result.stderr_tail
        return pd.read_csv(io.BytesIO(result.valid_csv)).prediction.to_numpy()

    assert np.allclose(out_of_fold(on_set.all_folds_code), x**2, atol=1e-6)
    assert not np.allclose(out_of_fold(raw.all_folds_code), x**2, atol=0.5)
