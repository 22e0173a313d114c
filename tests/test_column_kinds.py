"""What only a language model knows about a text column (operators/column_kinds.py): the
question, the engine's checks on planted answers, the program a useful answer becomes, who
asks and when (search/floor.py `column_question`), and on credit-g a scripted answer for
`checking_status` that becomes a feature program run in the sandbox and gated like any other."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from actors.llm import ScriptedLLM
from engine.search_context import SearchContext
from engine.search_run import task_context
from engine.step import Done, Execute, Generate, Step
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.column_kinds import (
    MAX_QUESTIONS,
    TAG,
    column_levels,
    column_program,
    date_program,
    levels_of,
    number_program,
    ordered_program,
    read_answer,
    worth_asking,
)
from operators.context import ColumnLevels, TaskContext
from operators.kinds import kind_of
from sandbox import Limits, run_script
from search.floor import QUESTION_TEMPERATURE, program_proposal
from search.greedy import GreedyPolicy
from search.journal import Journal
from search.mcts import MCTSPolicy
from search.node import Operator, Status
from search.policy import Proposal
from search.programs import REJECTED, gate_of
from tests.helpers import make_node

CREDIT_G = Path(__file__).parent.parent / "benchmarks" / "data" / "credit-g" / "credit_german.csv"
CHECKING = ["<0", "0<=X<200", ">=200", "no checking"]
QUALITY = ColumnLevels("quality", (("TA", 40), ("Gd", 30), ("Ex", 10), ("Fa", 8), ("Po", 2)), 5)
DATES = ColumnLevels("sold", (("2020-01-03", 5), ("2021-05-06 10:00", 2), ("3 Mar 2019", 2),
                              ("n/a", 1)), 4)
PRICES = ColumnLevels("price", (("$1,200", 5), ("45%", 3), ("€3", 3), ("12", 2)), 4)
IDS = ColumnLevels("user", tuple((f"u{i}", 1) for i in range(30)), 500)


def _answer(kind: str, order: list[str] | None = None) -> str:
    return json.dumps({"kind": kind, "order": order or []})


def _run(program: str, frame: pd.DataFrame) -> pd.DataFrame:
    namespace: dict[str, object] = {}
    exec(program, {"pd": pd}, namespace)  # the engine's own program text
    return namespace["add_features"](frame.copy())  # type: ignore[operator, no-any-return]


def test_a_right_order_becomes_the_levels_ranks() -> None:
    order = ["Po", "Fa", "TA", "Gd", "Ex"]
    program, said = column_program(f"```json\n{_answer('ordered', order)}\n```", QUALITY)
    assert program == ordered_program("quality", order) and "ordered levels" in said
    out = _run(program, pd.DataFrame({"quality": ["Ex", "Po", None, "TA"]}))
    assert out["quality_level"].tolist()[:2] == [4, 0] and out["quality_level"].isna()[2]


@pytest.mark.parametrize(("order", "why"), [
    (["Po", "Fa", "TA", "Gd"], "misses level 'Ex'"),
    (["Po", "TA", "Gd"], "misses levels 'Ex', 'Fa'"),
    (["Po", "Fa", "TA", "Gd", "Gd", "Ex"], "names 'Gd' twice"),
    (["Po", "Fa", "TA", "Gd", "Ex", "Excellent"], "names 'Excellent', which is not a level"),
])
def test_a_wrong_order_is_refused_with_the_reason(order: list[str], why: str) -> None:
    program, refusal = column_program(_answer("ordered", order), QUALITY)
    assert not program and refusal.startswith(REJECTED) and why in refusal, refusal


def test_a_column_with_more_levels_than_shown_cannot_be_ordered() -> None:
    program, refusal = column_program(_answer("ordered", ["u0", "u1"]), IDS)
    assert not program and "has 500, more than 30" in refusal


def test_a_date_and_a_number_held_as_text_are_checked_on_the_values() -> None:
    program, _ = column_program(_answer("date"), DATES)  # 9 of 10 values parse: most
    assert program == date_program("sold")
    out = _run(program, pd.DataFrame({"sold": ["2020-01-03", "n/a"]}))
    assert out.loc[0, ["sold_year", "sold_month", "sold_weekday", "sold_days"]].tolist() == [
        2020, 1, 4, 18264]
    assert out.loc[1, "sold_year"] != out.loc[1, "sold_year"]  # NaN
    program, _ = column_program(_answer("number"), PRICES)
    assert program == number_program("price")
    assert _run(program, pd.DataFrame({"price": ["$1,200", "45%", "x"]}))[
        "price_number"].tolist()[:2] == [1200, 45]
    # the same answers on columns whose values are neither
    _, refusal = column_program(_answer("date"), QUALITY)
    assert refusal.endswith("only 0% of its values parse as dates")
    _, refusal = column_program(_answer("number"), DATES)
    assert "parse as numbers" in refusal


@pytest.mark.parametrize("kind", ["identifier", "text", "category"])
def test_an_answer_that_gives_no_program_is_recorded_as_such(kind: str) -> None:
    program, refusal = column_program(_answer(kind), QUALITY)
    assert not program and refusal.startswith(REJECTED) and "gives no program" in refusal


@pytest.mark.parametrize(("reply", "why"), [
    ("I think it is ordered", "holds no JSON object"),
    ('{"kind": "ordered", "order": ["Po",', "holds no JSON object"),
    ('{"kind": "scale", "order": []}', "kind 'scale' is none of"),
    ('{"kind": "ordered", "order": "Po, Fa"}', "order is not a list"),
])
def test_a_reply_that_is_not_the_schema_is_refused(reply: str, why: str) -> None:
    program, refusal = column_program(reply, QUALITY)
    assert not program and why in refusal, refusal


def test_the_question_shows_the_levels_and_constrains_the_reply() -> None:
    ctx = TaskContext(preview="", target="SalePrice", task_type="regression", metric="rmse",
                      maximize=False, seed=4, text_levels=(QUALITY, IDS))
    proposal = Proposal(Operator.FEATURES, None, 0.0, idea="b", family="lgbm",
                        column="quality")
    prompt = kind_of(Operator.FEATURES).prompt(ctx, proposal, Journal())
    text = prompt.messages[-1]["content"]
    assert prompt.tag == TAG and not prompt.reply_start and not prompt.stop
    assert "'quality': \"TA\", \"Gd\", \"Ex\", \"Fa\", \"Po\"." in text  # most frequent first
    assert prompt.max_tokens < 100 and prompt.seed == 4
    schema = prompt.json_schema
    assert schema is not None and schema["required"] == ["kind", "order"]
    assert schema["properties"]["order"]["items"]["enum"] == ["TA", "Gd", "Ex", "Fa", "Po"]
    many = kind_of(Operator.FEATURES).prompt(ctx, dataclasses.replace(proposal, column="user"),
                                             Journal())
    assert "and 470 more" in many.messages[-1]["content"]
    assert many.json_schema is not None
    assert many.json_schema["properties"]["order"]["maxItems"] == 0


def test_the_columns_asked_are_few_and_the_likely_ones_first() -> None:
    yes_no = ColumnLevels("phone", (("yes", 5), ("no", 4)), 2)
    levels = column_levels(pd.read_csv(CREDIT_G).drop(columns="class"),
                           ["checking_status", "credit_history", "purpose", "savings_status",
                            "employment", "own_telephone"])
    assert levels[0].counts[0] == ("no checking", 394) and levels[0].complete
    # ranges first (levels that mostly hold digits), then the column order
    assert worth_asking(levels) == ("checking_status", "savings_status", "employment",
                                    "credit_history")
    assert len(worth_asking(levels)) == MAX_QUESTIONS
    # values that look like numbers or dates first, however many; an identifier, two levels,
    # never
    assert worth_asking([yes_no, IDS, QUALITY, PRICES, DATES]) == ("price", "sold", "quality")
    assert worth_asking([]) == ()


def _journal(*nodes: object) -> Journal:
    return Journal([make_node("base", operator=Operator.BASELINE, metric=0.5), *nodes])


def test_each_question_is_asked_once_before_the_programs_the_llm_writes() -> None:
    questions = ("checking_status", "savings_status")
    assert program_proposal(Journal(), 0.7, questions=questions) is None  # nothing to pair
    first = program_proposal(_journal(), 0.7, questions=questions)
    assert first is not None and first.column == "checking_status"
    assert (first.parent_id, first.idea, first.family) == (None, "base", "lgbm")
    assert first.temperature == QUESTION_TEMPERATURE
    # one in flight: the next column; both in flight: the LLM's own program
    second = program_proposal(_journal(), 0.7, questions=questions,
                              in_flight={(Operator.FEATURES, None): 1})
    assert second is not None and second.column == "savings_status"
    own = program_proposal(_journal(), 0.7, questions=questions,
                           in_flight={(Operator.FEATURES, None): 2})
    assert own is not None and not own.column and own.temperature == 0.7

    def answered(node_id: str, column: str, status: Status = Status.BUGGY) -> object:
        node = make_node(node_id, operator=Operator.FEATURES, status=status, step=1)
        return dataclasses.replace(node, hint=dataclasses.replace(first, column=column).hint)

    # the first answered, the second in flight: no question is left to ask
    done = _journal(answered("q1", "checking_status"))
    after = program_proposal(done, 0.7, questions=questions,
                             in_flight={(Operator.FEATURES, None): 1})
    assert after is not None and not after.column
    # a lost question is asked again
    lost = _journal(answered("q1", "checking_status", Status.LOST))
    again = program_proposal(lost, 0.7, questions=questions)
    assert again is not None and again.column == "checking_status"
    # the policies ask them through program_proposal; with none, a program as before
    for policy in (GreedyPolicy(seed=0, writes="features", questions=questions),
                   MCTSPolicy(seed=0, writes="features", questions=questions)):
        asked = policy.propose(_journal(), 3, {})
        assert [p.column for p in asked] == [*questions, ""]
    assert [p.column for p in GreedyPolicy(seed=0, writes="features").propose(
        _journal(), 2, {})] == ["", ""]


def test_a_column_question_reads_back_from_its_hint() -> None:
    proposal = Proposal(Operator.FEATURES, None, 0.0, idea="b", family="lgbm",
                        params=(("n_estimators", 50),), column="checking_status")
    assert Proposal.from_hint(Operator.FEATURES, None, 0.0, proposal.hint) == proposal
    assert "column" not in dataclasses.replace(proposal, column="").hint


@pytest.fixture(scope="module")
def credit_g() -> PreparedTask:
    return prepare_task(TaskSpec(CREDIT_G, "class", None, None, ""))


def test_on_credit_g_a_scripted_order_becomes_a_program_that_is_scored_and_gated(
        credit_g: PreparedTask, tmp_path: Path) -> None:
    """The scripted LLM answers the question under its tag; the order becomes a feature
    program that runs in the sandbox with the reference configuration, with and without it,
    and the gate judges it, as any program."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({TAG: [_answer("ordered", CHECKING)],
                                  "features": ["never asked here"]}))
    ctx = task_context(credit_g, 0)
    assert "checking_status" in [c.column for c in ctx.text_levels]
    base = make_node("base", operator=Operator.BASELINE, metric=0.5)
    search = SearchContext(credit_g, ctx, Journal([base]), run_id="r", policy="greedy")
    questions = worth_asking(ctx.text_levels)
    proposal = program_proposal(search.journal, 0.7, questions=questions)
    assert proposal is not None and proposal.column == "checking_status"
    proposal = dataclasses.replace(proposal, params=(("n_estimators", 30),))  # a quick fit
    step = Step(proposal, search)
    ask = step.next()
    assert isinstance(ask, Generate) and ask.prompt.tag == TAG
    (reply,) = ScriptedLLM(script).generate([ask.prompt])
    step.on_reply(reply)
    need = step.next()
    for _ in range(2):  # the first pair, then the other pairs when it gains by the mean
        assert isinstance(need, Execute) and need.folds == (-1,), need
        result = run_script(need.code, search.inputs(-1), Limits(wall_seconds=120))
        assert result.status == "ok", result.stderr_tail
        step.on_started(-1, 120.0)
        step.on_result(-1, result)
        need = step.next()
        if isinstance(need, Done):
            break
    assert isinstance(need, Done), need
    node = need.node
    assert node.status is Status.OK and node.metric is not None, node.error
    assert "'checking_status_level'" in node.code and ".map({'<0': 0" in node.code
    assert node.plan.startswith("the LLM reads 'checking_status' as ordered levels")
    assert Proposal.of(node).column == "checking_status" and node.reply == reply.text
    gate = gate_of(node)
    assert gate is not None and gate.added == ("checking_status_level",) and gate.reference
    assert gate.gains and gate.reason
    print(f"checking_status_level: kept {gate.kept}, mean gain {gate.mean_gain:+.4f} "
          f"over {len(gate.gains)} groups ({gate.reason})")


@pytest.mark.slow
def test_the_embedded_model_answers_credit_g_s_statuses_in_the_schema(
        credit_g: PreparedTask) -> None:
    """The real 1.5B model, asked about two of credit-g's ordered statuses: its replies follow
    the schema (llama.cpp decodes by its grammar) and the engine's checks give each a verdict.
    Whether it is right is printed, not asserted: that is the model's part, not the engine's."""
    from actors.llama_backend import LlamaLLM

    ctx = task_context(credit_g, 0)
    with LlamaLLM(seed=0, n_threads=1) as llm:
        for column in ("savings_status", "checking_status"):
            proposal = Proposal(Operator.FEATURES, None, QUESTION_TEMPERATURE, idea="b",
                                family="lgbm", column=column)
            prompt = kind_of(Operator.FEATURES).prompt(ctx, proposal, Journal())
            (reply,) = llm.generate([prompt])
            answer = read_answer(reply.text)
            program, verdict = column_program(reply.text, levels_of(ctx, column))
            print(f"\n{column}: {reply.text!r} ({reply.completion_tokens} tokens, "
                  f"{reply.seconds:.1f} s, {reply.finish_reason})\n  -> "
                  f"{'program: ' + program if program else verdict}")
            assert isinstance(answer, tuple), answer  # the schema's kind and order
            assert bool(program) != verdict.startswith(REJECTED)
