"""Operators: prompts built from context, replies parsed into plan and code."""

from __future__ import annotations

import ast

from search.journal import Journal
from search.node import Operator, Status
from search.operators import (
    TaskContext,
    api_hints,
    build_prompt,
    parse_reply,
    repair_prompt,
    self_reported_metric,
    skeleton,
)
from search.policy import Proposal
from tests.helpers import make_node

CTX = TaskContext(preview="Predict strength.", target="strength", task_type="regression",
                  metric="rmse", maximize=False)


def test_parse_reply_takes_longest_block_and_plan() -> None:
    text = ("I will use a forest.\n```python\nx = 1\n```\nand\n```python\n"
            "import pandas as pd\ny = 2\n```\n")
    parsed = parse_reply(text)
    assert parsed.plan == "I will use a forest."
    assert parsed.code == "import pandas as pd\ny = 2\n"
    assert parsed.problem == ""


def test_parse_reply_unterminated_fence_and_syntax_error() -> None:
    assert parse_reply("```python\nimport os\nprint(os.getcwd())\n").problem == ""
    bad = parse_reply("```python\ndef f(:\n```")
    assert "SyntaxError" in bad.problem and bad.code


def test_parse_reply_without_code() -> None:
    assert parse_reply("I cannot help with that.").problem
    assert parse_reply("").code == ""


def test_skeleton_parses_for_both_shapes() -> None:
    ast.parse(skeleton(CTX))
    proba = TaskContext("p", "y", "binary", "roc_auc", True, ("0", "1"), needs_proba=True)
    assert "proba_" in skeleton(proba)
    ast.parse(skeleton(proba))


def test_prompts_share_a_byte_identical_prefix() -> None:
    j = Journal([make_node("a", metric=-5.0), make_node("b", status=Status.BUGGY, step=1)])
    prompts = [
        build_prompt(CTX, Proposal(Operator.DRAFT), j),
        build_prompt(CTX, Proposal(Operator.IMPROVE, "a"), j),
        build_prompt(CTX, Proposal(Operator.DEBUG, "b"), j),
    ]
    users = [p.messages[-1]["content"] for p in prompts]
    prefix = users[0][: users[0].index("# Your job")]
    assert all(u.startswith(prefix) for u in users)
    assert all(p.messages[0] == prompts[0].messages[0] for p in prompts)
    assert [p.tag for p in prompts] == ["draft", "improve", "debug"]


def test_debug_prompt_carries_error_trace_and_api_hint() -> None:
    node = make_node("b", status=Status.BUGGY)
    node = type(node)(**{**node.to_record(), "operator": node.operator, "status": node.status,
                         "error": "TypeError: got an unexpected keyword argument 'squared'",
                         "stderr_tail": "File \"solution.py\", line 9\nTypeError: squared"})
    prompt = build_prompt(CTX, Proposal(Operator.DEBUG, "b"), Journal([node]))
    text = prompt.messages[-1]["content"]
    assert "unexpected keyword argument 'squared'" in text
    assert "line 9" in text and "root_mean_squared_error" in text


def test_improve_prompt_lists_what_was_tried() -> None:
    j = Journal([make_node("a", metric=-5.0)])
    child = make_node("c", "a", step=1)
    child = type(child)(**{**child.to_record(), "operator": child.operator,
                           "status": child.status, "plan": "Add ratio features."})
    j.add(child)
    text = build_prompt(CTX, Proposal(Operator.IMPROVE, "a"), j).messages[-1]["content"]
    assert "Already tried" in text and "Add ratio features." in text


def test_repair_prompt_appends_the_problem() -> None:
    prompt = build_prompt(CTX, Proposal(Operator.DRAFT), Journal())
    again = repair_prompt(prompt, "no code", "Your reply contained no code.")
    assert again.messages[:2] == prompt.messages and len(again.messages) == 4
    assert "no code" in again.messages[-1]["content"]


def test_api_hints_and_self_reported() -> None:
    assert api_hints("fit() got an unexpected keyword argument 'early_stopping_rounds'")
    assert api_hints("all good") == []
    assert self_reported_metric("train done\nValidation RMSE: 5.25\n") == 5.25
    assert self_reported_metric("nothing") is None
