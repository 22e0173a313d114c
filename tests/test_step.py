"""The step as a pure state machine: what it asks for next, given scripted replies and
hand-made execution results, and the Node it builds. No Ray, no sandbox."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from common.chat import Reply
from engine.search_context import Running, SearchContext
from engine.step import (
    DEADLINE_ERROR,
    Done,
    Execute,
    Generate,
    Step,
)
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.context import TaskContext
from operators.harness import model_part
from operators.kinds.baseline import BASELINE_PLAN
from operators.measure import MARK
from operators.retrieval import AS_STORED, Case
from sandbox import ExecResult
from search.journal import Journal
from search.node import Node, Operator, Status, code_hash
from search.policy import Proposal
from search.programs import GATE_PAIRS, REJECTED, Gate
from tests.helpers import make_data, make_node

GOOD = ("A ridge model.\n```python\nfrom sklearn.linear_model import Ridge\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    model = Ridge().fit(X, y)\n"
        "    return model.predict(X_valid), model.predict(X_test)\n```\n")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    path = tmp_path_factory.mktemp("step") / "train.csv"
    make_data(path, rows=100)
    return prepare_task(TaskSpec(path, "y", None, None, ""))


def context(task: PreparedTask, journal: Journal | None = None, **options: object
            ) -> SearchContext:
    ctx = TaskContext(preview=task.preview(), target="y", task_type="regression",
                      metric="rmse", maximize=False, seed=3)
    return SearchContext(task, ctx, journal or Journal(), run_id="r", policy="greedy",
                         **options)  # type: ignore[arg-type]


def reply(text: str, tokens: int = 10) -> Reply:
    return Reply(text, tokens, tokens, 0.5, "fake")


def ran(task: PreparedTask, valid: list[float] | None, status: str = "ok") -> ExecResult:
    def csv(rows: int) -> bytes | None:
        if valid is None:
            return None
        buffer = io.StringIO()
        pd.DataFrame({"prediction": (valid * rows)[:rows]}).to_csv(buffer, index=False)
        return buffer.getvalue().encode()

    return ExecResult(status, 0 if status == "ok" else None, "", "", 1.5,
                      csv(len(task.valid_X)), csv(len(task.test_X)),
                      "" if status == "ok" else "timed out", "bwrap")


def test_a_draft_asks_repairs_once_runs_and_is_scored(task: PreparedTask) -> None:
    search = context(task)
    step = Step(Proposal(Operator.DRAFT, None, 0.7, idea="a ridge model"), search)
    first = step.next()
    assert isinstance(first, Generate) and first.prompt.tag == "draft"
    assert first.prompt.seed == 3 * 100_003 + 0 * 101 + 1  # run seed, journal size, request
    assert step.next() is None  # each request is handed out once; nothing new until a reply
    step.on_reply(reply("I forgot the code."))
    repair = step.next()
    assert isinstance(repair, Generate) and len(repair.prompt.messages) == 4
    assert repair.prompt.seed == first.prompt.seed + 1
    step.on_reply(reply(GOOD))
    run = step.next()
    assert isinstance(run, Execute) and run.seconds == 300.0 and "def fit_predict" in run.code
    assert run.folds == (0,)  # the holdout: one fold
    assert search.running == {code_hash(run.code): Running(step.node_id, Operator.DRAFT, None,
                                                            run.code)}
    step.on_started(0, 300.0)
    step.on_result(0, ran(task, [float(task.valid_y.mean())]), executor="exec-0",
                   node_ip="1.2.3.4")
    done = step.next()
    assert isinstance(done, Done) and search.running == {}
    node = done.node
    assert node.status is Status.OK and node.operator is Operator.DRAFT
    assert node.metric_raw is not None and node.metric == -node.metric_raw
    assert done.test_raw is not None
    assert node.hint == "a ridge model" and node.plan == "A ridge model."
    assert (node.prompt_tokens, node.completion_tokens, node.llm_seconds) == (20, 20, 1.0)
    assert node.executor == "exec-0" and node.node_ip == "1.2.3.4"
    assert len(json.loads(node.prompt)) == 4 and node.reply == GOOD  # the whole exchange
    assert step.repaired and not step.duplicate


def test_a_second_reply_without_code_is_buggy_without_running(task: PreparedTask) -> None:
    step = Step(Proposal(Operator.DRAFT), context(task))
    step.next()
    step.on_reply(reply("no code"))
    step.next()
    step.on_reply(reply("still no code"))
    done = step.next()
    assert isinstance(done, Done) and done.node.status is Status.BUGGY
    assert done.predictions is None and "does not parse" in done.node.error


def test_a_refused_feature_program_ends_without_a_second_call(task: PreparedTask) -> None:
    step = Step(Proposal(Operator.FEATURES, None, 0.7, family="lgbm"), context(task))
    ask = step.next()
    assert isinstance(ask, Generate) and ask.prompt.tag == "features"
    step.on_reply(reply('```python\ndef add_features(df):\n    df["twice"] = df["y"] * 2\n'
                        '    return df\n```'))
    done = step.next()
    assert isinstance(done, Done) and done.node.status is Status.BUGGY, done
    assert done.node.error.startswith(REJECTED) and "target" in done.node.error
    assert not step.repaired and done.node.llm_seconds == 0.5  # one call


def _program(*statements: str) -> Reply:
    body = "".join(f"    {line}\n" for line in statements)
    return reply(f"```python\ndef add_features(df):\n{body}    return df\n```")


def test_a_feature_program_repeating_one_being_scored_on_its_set_is_refused(
        task: PreparedTask) -> None:
    """The refusal of what was scored on a feature set holds for a reply that arrives while
    the first copy is still being scored: under any name it is not run a second time; a new
    computation runs, and so does the same one on another set."""
    bc = 'def add_features(df):\n    df["bc"] = df["b"] * df["c"]\n    return df\n'
    kept = replace(make_node("k", operator=Operator.FEATURES),
                   code=f"FEATURE_PROGRAMS = [{bc!r}]\n",
                   gate=Gate("b", (0.1,) * 4, True, "kept", ("bc",)).to_json())
    search = context(task, Journal([kept]))
    search.ctx = replace(search.ctx, columns=("a", "b", "c"))

    def answered(parent: str | None, program: Reply) -> Step:
        step = Step(Proposal(Operator.FEATURES, parent, 0.7, family="lgbm"), search)
        step.next()
        step.on_reply(program)
        return step

    first = answered(None, _program('df["ab"] = df["a"] * df["b"]'))
    assert isinstance(first.next(), Execute)
    # a program asked for now keeps the one being scored off its decoding, beside the kept
    # one scored there, and on its set only (on the kept set, what it computes)
    asked = Step(Proposal(Operator.FEATURES, None, 0.7, family="lgbm"), search).next()
    assert isinstance(asked, Generate)
    assert asked.prompt.never_computations == ("df['a'] * df['b']", "df['b'] * df['c']")
    on_k = Step(Proposal(Operator.FEATURES, "k", 0.7, family="lgbm"), search).next()
    assert isinstance(on_k, Generate) and on_k.prompt.never_computations == ("df['b'] * df['c']",)
    again = answered(None, _program('df["a_times_b"] = df["a"] * df["b"]'))
    done = again.next()
    assert isinstance(done, Done) and done.node.status is Status.BUGGY
    assert done.node.error == (f"{REJECTED} it computes what a program now being scored on "
                               "this feature set computes (a * b): compute something new")
    assert "a_times_b" in done.node.code and done.node.llm_seconds == 0.5  # one call
    assert isinstance(answered(None, _program('df["ac"] = df["a"] * df["c"]')).next(), Execute)
    assert isinstance(answered("k", _program('df["ab"] = df["a"] * df["b"]')).next(), Execute)
    first.on_started(-1, 300.0)  # a feature program runs every fold in one process
    first.on_result(-1, ran(task, None, "buggy"))
    assert isinstance(first.next(), Done)
    # once the first copy is over it is no longer running: the journal's rule takes over
    assert isinstance(answered(None, _program('df["ab2"] = df["a"] * df["b"]')).next(), Execute)


def _program_ran(task: PreparedTask, blocks: dict[int, float]) -> ExecResult:
    """A feature program's all-folds run on the holdout: its own predictions (the valid
    rows' mean) and gate.csv's blocks, each predicting the truth plus its offset; the harness
    timed 0.5 s of its 1.5 s fitting them."""
    truth = task.valid_y.reset_index(drop=True)
    own = pd.DataFrame({"prediction": [float(truth.mean())] * len(truth)})
    test = pd.DataFrame({"fold": 0, "prediction": [float(truth.mean())] * len(task.test_X)})
    gate = pd.concat([pd.DataFrame({"fold": block, "prediction": truth + offset})
                      for block, offset in blocks.items()])
    measured = MARK + json.dumps({"fit_predict_seconds": 0.4, "gate_seconds": 0.5})
    return ExecResult("ok", 0, f"\n{measured}\n", "", 1.5, own.to_csv(index=False).encode(),
                      test.to_csv(index=False).encode(), "", "bwrap",
                      gate_csv=gate.to_csv(index=False).encode())


def _features_search(task: PreparedTask) -> SearchContext:
    kept = replace(make_node("k", operator=Operator.FEATURES),
                   code="FEATURE_PROGRAMS = ['def add_features(df):\\n    df[\"bc\"] = "
                        "df[\"b\"] * df[\"c\"]\\n    return df\\n']\n",
                   gate=Gate("b", (0.1,) * 4, True, "kept", ("bc",)).to_json())
    search = context(task, Journal([kept]))
    search.ctx = replace(search.ctx, columns=("a", "b", "c"))
    return search


PARAMS = (("learning_rate", 0.1), ("n_estimators", 50))
BOTH_SIDES = "Encoded(lgb.LGBMRegressor(**PARAMS, subsample_freq=1, random_state=seed, " \
             "verbose=-1), FEATURE_PROGRAMS[:-1])"


def _program_run(search: SearchContext, program: Reply, parent: str | None = None,
                 config: tuple[tuple[str, float], ...] = PARAMS,
                 family: str = "lgbm") -> tuple[Step, Execute]:
    step = Step(Proposal(Operator.FEATURES, parent, 0.7, idea="b", family=family,
                         params=config), search)
    step.next()
    step.on_reply(program)
    run = step.next()
    assert isinstance(run, Execute) and run.folds == (-1,), run
    return step, run


def _ran(step: Step, result: ExecResult) -> Done | Execute:
    step.on_started(-1, 300.0)
    step.on_result(-1, result)
    need = step.next()
    assert isinstance(need, Done | Execute), need
    return need


def test_a_references_sides_without_the_program_are_fitted_once(task: PreparedTask) -> None:
    """The gate's sides without the program depend only on the reference configuration, its
    feature set and the seed: the first program on a reference fits them, the search keeps
    them, and a later program there fits the sides with the program alone and is judged
    against the kept ones; another configuration or feature set fits its own. The pairs come
    in two runs: the first pair's, and the others only for a program whose first pair gained
    by the mean."""
    search = _features_search(task)
    first, run = _program_run(search, _program('df["ab"] = df["a"] * df["b"]'))
    assert BOTH_SIDES in run.code and f"GATE_PAIRS = {GATE_PAIRS[:1]!r}" in run.code
    assert search.reference_sides == {}
    # better than its absence by 0.1 in every row: its other pairs run, both sides
    second_run = _ran(first, _program_ran(task, {0: 0.1, 1: 0.2}))
    assert isinstance(second_run, Execute) and second_run.folds == (-1,)
    assert BOTH_SIDES in second_run.code and f"GATE_PAIRS = {GATE_PAIRS[1:]!r}" in second_run.code
    assert len(search.reference_sides[("", "lgbm", PARAMS)]) == 1  # kept at once
    later = len(GATE_PAIRS) - 1
    done = _ran(first, _program_ran(task, {b: 0.1 + 0.1 * (b % 2) for b in range(2 * later)}))
    assert isinstance(done, Done) and done.node.status is Status.OK, done.node.error
    gate = Gate.from_json(done.node.gate)
    assert gate is not None and gate.kept and gate.pairs == len(GATE_PAIRS) and not gate.reused
    assert gate.splits == tuple(split for split, _ in GATE_PAIRS)
    assert len(gate.gains) == 15 and gate.gains == pytest.approx((0.1,) * 15, rel=1e-6)
    assert done.node.exec_seconds == pytest.approx(3.0)  # both runs count
    # of them, the gate's fits: 0.5 s in its scoring run, and the second pair's whole run
    assert done.node.gate_seconds == pytest.approx(0.5 + 1.5)
    assert [run[0] for run in json.loads(done.node.runs)] == [-2, -1]
    assert list(search.reference_sides) == [("", "lgbm", PARAMS)]
    assert len(search.reference_sides[("", "lgbm", PARAMS)]) == len(GATE_PAIRS)
    # the next program on the same reference fits the sides with it alone; worse than its
    # absence, it stops after its first pair
    second, run = _program_run(search, _program('df["ac"] = df["a"] * df["c"]'))
    assert BOTH_SIDES not in run.code and "def gate_models(seed)" in run.code
    assert BOTH_SIDES in second.code  # the node's own code is the same either way
    done = _ran(second, _program_ran(task, {0: 0.3}))
    assert isinstance(done, Done) and done.node.status is Status.OK, done.node.error
    gate = Gate.from_json(done.node.gate)
    assert gate is not None and gate.reused and gate.pairs == 1 and not gate.kept
    assert gate.mean_gain < 0 and "with its first pair" in gate.reason
    assert done.node.exec_seconds == pytest.approx(1.5)
    assert done.node.gate_seconds == pytest.approx(0.5)
    # a better one there fits both its pairs' sides with the program alone
    third, run = _program_run(search, _program('df["a2"] = df["a"] * df["a"]'))
    second_run = _ran(third, _program_ran(task, {0: 0.1}))
    assert isinstance(second_run, Execute) and BOTH_SIDES not in second_run.code
    done = _ran(third, _program_ran(task, {2 * b: 0.1 for b in range(later)}))
    gate = Gate.from_json(done.node.gate) if isinstance(done, Done) else None
    assert gate is not None and gate.kept and gate.reused and gate.pairs == len(GATE_PAIRS)
    # another configuration, or another feature set, pairs with sides of its own
    assert BOTH_SIDES in _program_run(search, _program('df["bc2"] = df["b"] - df["c"]'),
                                      config=(("learning_rate", 0.2), ("n_estimators", 50)))[1].code
    assert BOTH_SIDES in _program_run(search, _program('df["ab"] = df["a"] * df["b"]'),
                                      parent="k")[1].code


def test_a_program_whose_second_pair_gives_no_gains_is_scored_and_not_kept(
        task: PreparedTask) -> None:
    """Its node ran and was scored: a second pair that failed, or the deadline before it ran,
    leaves a candidate not kept, its first pair's gains recorded, never a lost node."""
    for ending in ("buggy", "deadline"):
        search = _features_search(task)
        step, _ = _program_run(search, _program('df["ab"] = df["a"] * df["b"]'))
        assert isinstance(_ran(step, _program_ran(task, {0: 0.1, 1: 0.2})), Execute)
        if ending == "buggy":
            done = _ran(step, ExecResult("buggy", 1, "", "Traceback: boom", 1.0, None, None,
                                         "", "bwrap"))
        else:
            done = step.kill(DEADLINE_ERROR)
        assert isinstance(done, Done) and done.node.status is Status.OK, done.node.error
        assert done.predictions is not None
        gate = Gate.from_json(done.node.gate)
        assert gate is not None and not gate.kept and gate.pairs == 1, gate
        assert ("second pair's run ended buggy" if ending == "buggy"
                else "before its second pair ran") in gate.reason


def test_a_reference_without_a_seed_is_judged_on_one_pair_a_split(task: PreparedTask) -> None:
    """Another seed fits the same model: one pair on each split, and the rule reads those."""
    search = _features_search(task)
    step, run = _program_run(search, _program('df["ab"] = df["a"] * df["b"]'),
                             config=(("alpha", 1.0),), family="linear")
    assert "GATE_PAIRS = ((0, 1),)" in run.code
    second_run = _ran(step, _program_ran(task, {0: 0.1, 1: 0.2}))
    assert isinstance(second_run, Execute)
    assert "GATE_PAIRS = ((1, 3), (2, 5))" in second_run.code
    done = _ran(step, _program_ran(task, {0: 0.1, 1: 0.2, 2: 0.1, 3: 0.2}))
    gate = Gate.from_json(done.node.gate) if isinstance(done, Done) else None
    assert gate is not None and gate.kept and gate.pairs == 3 and gate.splits == (0, 1, 2)


TREES = ("from sklearn.ensemble import ExtraTreesRegressor\n\n"
         "PARAMS = {'n_estimators': 50}\n\n\n"
         "def fit_predict(X, y, X_valid, X_test):\n"
         "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
         "    model = ExtraTreesRegressor(**PARAMS, random_state=0)\n"
         "    model.fit(X, y)\n"
         "    return model.predict(X_valid), model.predict(X_test)\n")


def test_a_case_runs_as_stored_without_the_llm_and_its_recall_runs_as_written(
        task: PreparedTask) -> None:
    ridge = model_part(GOOD.split("```python\n")[1].split("```")[0]).replace("Ridge()",
                                                                              "Ridge(alpha=2.0)")
    remembered = (Case("c1", "other", "other.csv", "regression", {}, "tune", "rmse", 0.2, TREES),
                  Case("c2", "other", "other.csv", "regression", {}, "draft", "rmse", 0.1, ridge))
    search = context(task)
    search.ctx = replace(search.ctx, cases=remembered)
    case = Step(Proposal(Operator.CASE, idea="c1"), search)
    # No LLM call. The engine's own earlier form (prepare, one estimator) runs as the
    # make_model() code it has now: every fold in one run, its fold models kept.
    run = case.next()
    assert isinstance(run, Execute) and run.folds == (-1,)
    assert "return Encoded(ExtraTreesRegressor(**PARAMS, random_state=0))" in case.code
    assert "PARAMS = {'n_estimators': 50}" in case.code and "prepare(" not in model_part(case.code)
    assert case.plan == f"{AS_STORED}: tune code of other.csv"
    # Other code runs as stored, fold by fold like LLM-written code.
    llm_written = Step(Proposal(Operator.CASE, idea="c2"), search).next()
    assert isinstance(llm_written, Execute) and llm_written.folds == (0,)
    assert model_part(llm_written.code).strip() == ridge.strip()
    # The recall's reply runs as written even when it dropped the case's model: the case
    # itself already runs in its own node.
    recall = Step(Proposal(Operator.RECALL, idea="c1"), search)
    assert isinstance(recall.next(), Generate)
    recall.on_reply(reply(GOOD))
    ran = recall.next()
    assert isinstance(ran, Execute) and "Ridge" in ran.code and "ExtraTrees" not in ran.code
    assert not recall.plan.startswith(AS_STORED)


def test_reflection_comes_first_and_lands_in_the_code_prompt(task: PreparedTask) -> None:
    parent = make_node("p", code=GOOD, metric=-1.0)
    search = context(task, Journal([parent]), reflect=True)
    step = Step(Proposal(Operator.IMPROVE, "p"), search)
    ask = step.next()
    assert isinstance(ask, Generate) and ask.prompt.tag == "reflect"
    # The idea reflected on is pinned, so the code prompt asks for the same change.
    assert step.proposal.idea
    step.on_reply(reply("Use a smaller alpha."))
    code = step.next()
    assert isinstance(code, Generate) and code.prompt.tag == "improve"
    assert "Use a smaller alpha." in code.prompt.messages[-1]["content"]
    assert code.prompt.seed == ask.prompt.seed + 1  # one more request of the run
    step.on_reply(reply(GOOD.replace("Ridge()", "Ridge(alpha=0.1)")))
    assert isinstance(step.next(), Execute)
    node = step.kill(DEADLINE_ERROR).node
    assert node.reflection == "Use a smaller alpha." and node.depth == 1
    assert node.status is Status.KILLED and node.hint == step.proposal.idea


def test_code_already_in_the_journal_or_running_is_not_run_again(task: PreparedTask) -> None:
    first = Step(Proposal(Operator.DRAFT), context(task))
    first.next()
    first.on_reply(reply(GOOD))
    assert isinstance(first.next(), Execute)
    stored = Node(node_id="old", parent_id=None, operator=Operator.DRAFT, status=Status.OK,
                  code=first.code, code_hash=code_hash(first.code))
    for search in (context(task, Journal([stored])), first.search):
        twin = Step(Proposal(Operator.DRAFT), search)
        twin.next()
        twin.on_reply(reply(GOOD))
        done = twin.next()
        assert isinstance(done, Done) and done.node.status is Status.BUGGY
        assert done.node.error.startswith("duplicate of node ") and done.node.code == ""
        assert twin.duplicate


def test_engine_written_steps_run_at_once(task: PreparedTask) -> None:
    step = Step(Proposal(Operator.BASELINE), context(task))
    run = step.next()
    assert isinstance(run, Execute) and "LGBMRegressor" in run.code
    assert step.plan == BASELINE_PLAN and step.prompt is None


def test_a_timeout_at_the_deadline_is_a_kill_and_a_bad_submission_is_buggy(
        task: PreparedTask) -> None:
    step = Step(Proposal(Operator.BASELINE), context(task))
    run = step.next()
    assert isinstance(run, Execute)
    step.on_started(run.folds[0], 12.0)  # the budget had 12 s left: less than the 300 s cap
    step.on_result(run.folds[0], ran(task, None, status="timeout"))
    node = step.next()
    assert isinstance(node, Done)
    assert (node.node.status, node.node.error) == (Status.KILLED, DEADLINE_ERROR)
    short = Step(Proposal(Operator.BASELINE), context(task))
    (fold,) = short_folds = short.next().folds  # type: ignore[union-attr]
    assert short_folds == (-1,)  # engine-written: every fold in one run
    short.on_started(fold, 300.0)
    result = ran(task, [1.0])
    short.on_result(fold, ExecResult(**{**{f: getattr(result, f) for f in result.__slots__},
                                        "valid_csv": b"prediction\n1\n"}))
    done = short.next()
    assert isinstance(done, Done) and done.node.status is Status.BUGGY
    assert "rows; expected" in done.node.error and done.node.metric is None


def test_insights_are_ideas_nothing_runs(task: PreparedTask) -> None:
    step = Step(Proposal(Operator.INSIGHTS, stage="feature engineering"), context(task))
    ask = step.next()
    assert isinstance(ask, Generate) and ask.prompt.tag == "insights"
    step.on_reply(reply('["add a ratio", "bin a column"]'))
    done = step.next()
    assert isinstance(done, Done) and done.predictions is None
    assert done.node.status is Status.OK and json.loads(done.node.plan) == [
        "add a ratio", "bin a column"]


def test_analysis_runs_with_a_shorter_cap_and_needs_a_printout(task: PreparedTask,
                                                               tmp_path: Path) -> None:
    search = context(task)
    step = Step(Proposal(Operator.ANALYZE, None, 0.3), search)
    step.next()
    step.on_reply(reply("```python\ndf.shape\n```"))
    run = step.next()
    assert isinstance(run, Execute) and run.seconds == 120.0 and "_show(df.shape)" in run.code
    step.on_started(0, run.seconds)
    step.on_result(0, ran(task, None))
    done = step.next()
    assert isinstance(done, Done)
    assert (done.node.status, done.node.error) == (Status.BUGGY,
                                                   "the analysis script printed nothing")


def test_stale_proposals_name_nodes_never_stored(task: PreparedTask) -> None:
    search = context(task, Journal([make_node("a")]))
    assert not search.stale(Proposal(Operator.IMPROVE, "a"))
    assert search.stale(Proposal(Operator.DEBUG, "gone"))
    assert search.stale(Proposal(Operator.ENSEMBLE, "a", members=("a", "gone")))
    assert not search.stale(Proposal(Operator.DRAFT))


def test_llm_code_runs_fold_zero_first_then_the_rest_and_fails_fast(task: PreparedTask) -> None:
    from engine.evaluation.folds import make_folds

    folds = make_folds(task, 3, seed=0)

    def fold_result(fold: int, status: str = "ok") -> ExecResult:
        rows = len(folds.rows(fold))
        valid = pd.DataFrame({"prediction": [float(task.valid_y.mean())] * rows})
        test = pd.DataFrame({"prediction": [1.0] * len(task.test_X)})
        return ExecResult(status, 0, "", "", 1.0, valid.to_csv(index=False).encode(),
                          test.to_csv(index=False).encode(), "", "bwrap")

    search = context(task, folds=folds)
    step = Step(Proposal(Operator.DRAFT), search)
    step.next()
    step.on_reply(reply(GOOD))
    first = step.next()
    assert isinstance(first, Execute) and first.folds == (0,)
    step.on_started(0, 300.0)
    step.on_result(0, fold_result(0), executor="exec-0")
    rest = step.next()
    assert isinstance(rest, Execute) and rest.folds == (1, 2)
    assert step.next() is None  # handed out: waits for their results
    step.on_started(2, 300.0)
    step.on_started(1, 300.0)
    step.on_result(2, fold_result(2), executor="exec-1")
    assert step.next() is None  # fold 1 still runs
    step.on_result(1, fold_result(1), executor="exec-0")
    done = step.next()
    assert isinstance(done, Done) and done.node.status is Status.OK
    assert done.predictions is not None and len(done.predictions.valid) == len(folds.fold_of)
    assert [run[0] for run in json.loads(done.node.runs)] == [0, 1, 2]
    assert done.node.exec_seconds == 3.0

    failing = Step(Proposal(Operator.DRAFT), context(task, folds=folds))
    failing.next()
    failing.on_reply(reply(GOOD.replace("Ridge()", "Ridge(alpha=2.0)")))
    failing.next()
    failing.on_started(0, 300.0)
    failing.on_result(0, ExecResult("buggy", 1, "", "KeyError: 'x'", 0.5, None, None,
                                    "KeyError: 'x'", "bwrap"))
    done = failing.next()
    assert isinstance(done, Done) and done.node.status is Status.BUGGY
    assert done.node.error == "KeyError: 'x'" and len(json.loads(done.node.runs)) == 1


def test_a_trial_of_an_llm_node_changes_only_its_params_and_runs_fold_by_fold(
        task: PreparedTask) -> None:
    from operators.harness import assemble as wrap
    from operators.params import read_params

    search = context(task)
    model = ("from sklearn.linear_model import Ridge\n\nPARAMS = {'alpha': 1.0}\n\n\n"
             "def fit_predict(X, y, X_valid, X_test):\n"
             "    model = Ridge(**PARAMS).fit(X, y)\n"
             "    return model.predict(X_valid), model.predict(X_test)\n")
    parent = Node(node_id="llm", parent_id=None, operator=Operator.DRAFT, status=Status.OK,
                  code=wrap(search.ctx, model), metric=-1.0, metric_raw=1.0)
    search.journal.add(parent)
    step = Step(Proposal(Operator.TUNE, "llm", 0.0, idea="node llm trial 3",
                         params=(("alpha", 0.25),)), search)
    run = step.next()
    assert isinstance(run, Execute) and run.folds == (0,)  # LLM-written code: fold by fold
    assert read_params(step.code.split("# ---- model code (written by the LLM) ----")[1]) == {
        "alpha": 0.25}
    assert step.code.replace("0.25", "1.0") == parent.code
    assert "node llm" in step.plan
    node = step.kill(DEADLINE_ERROR).node
    assert json.loads(node.params) == {"alpha": 0.25} and node.depth == 1


def test_a_generation_cut_short_counts_its_seconds(task: PreparedTask) -> None:
    now = [100.0]
    step = Step(Proposal(Operator.DRAFT), context(task), clock=lambda: now[0])
    assert isinstance(step.next(), Generate)
    now[0] = 110.0  # queued 10 s for a free actor: not the actor's time
    step.generating("llm-0")
    now[0] = 140.0
    node = step.kill(DEADLINE_ERROR).node
    assert node.status is Status.KILLED and node.llm_actor == "llm-0"
    assert node.llm_seconds == 30.0
    answered = Step(Proposal(Operator.DRAFT), context(task), clock=lambda: now[0])
    answered.next()
    answered.generating("llm-0")
    answered.on_reply(reply(GOOD))  # 0.5 s by the reply's own count
    now[0] = 200.0  # killed while its folds run: no generation in flight
    assert answered.kill(DEADLINE_ERROR).node.llm_seconds == 0.5
