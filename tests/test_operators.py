"""Operators: prompts built from context, replies parsed into plan and code."""

from __future__ import annotations

import ast

from operators.context import TaskContext
from operators.failures import api_hints
from operators.harness import assemble, model_part
from operators.kinds import build_prompt, repair_prompt
from operators.replies import parse_reply, self_reported_metric
from search.journal import Journal
from search.node import MODEL_START, Operator, Status
from search.policy import Proposal
from tests.helpers import make_node

CTX = TaskContext(preview="Predict strength.", target="strength", task_type="regression",
                  metric="rmse", maximize=False)


FIT = "def fit_predict(X, y, X_valid, X_test):\n    return X_valid.a, X_test.a\n"


def test_parse_reply_wraps_model_code_in_the_harness() -> None:
    text = f"I will use a forest.\n```python\nx = 1\n```\nand\n```python\nimport os\n{FIT}```\n"
    parsed = parse_reply(text, CTX)
    assert parsed.plan == "I will use a forest."
    assert parsed.problem == ""
    assert MODEL_START in parsed.code and "submission/valid.csv" in parsed.code
    assert model_part(parsed.code) == "import os\n" + FIT
    ast.parse(parsed.code)


def test_parse_reply_keeps_a_whole_script() -> None:
    script = "import pandas as pd\npd.DataFrame().to_csv('submission/valid.csv')\n"
    parsed = parse_reply(f"```python\n{script}```", CTX)
    assert parsed.code == script and parsed.problem == ""


def test_parse_reply_problems() -> None:
    assert parse_reply(f"```python\n{FIT}", CTX).problem == ""  # unterminated fence
    bad = parse_reply("```python\ndef f(:\n```", CTX)
    assert "SyntaxError" in bad.problem and bad.code
    assert "fit_predict" in parse_reply("```python\nimport os\n```", CTX).problem
    assert parse_reply("I cannot help with that.", CTX).problem
    assert parse_reply("", CTX).code == ""


def test_assembled_script_runs_and_checks_row_counts(tmp_path) -> None:
    import subprocess
    import sys

    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "train.csv").write_text("a,strength\n1,2\n3,4\n")
    (tmp_path / "input" / "valid.csv").write_text("a\n5\n6\n")
    (tmp_path / "input" / "test.csv").write_text("a\n7\n")
    good = assemble(CTX, FIT)
    (tmp_path / "good.py").write_text(good)
    subprocess.run([sys.executable, "good.py"], cwd=tmp_path, check=True)
    assert (tmp_path / "submission" / "valid.csv").read_text().split() == ["prediction", "5", "6"]
    short = assemble(CTX, FIT.replace("return X_valid.a", "return X_valid.a[:1]"))
    (tmp_path / "short.py").write_text(short)
    run = subprocess.run([sys.executable, "short.py"], cwd=tmp_path, capture_output=True,
                         text=True)
    assert run.returncode != 0 and "never split" in run.stderr


def test_harness_for_probabilities(tmp_path) -> None:
    import subprocess
    import sys

    ctx = TaskContext("p", "y", "binary", "roc_auc", True, ("no", "yes"), needs_proba=True)
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "train.csv").write_text("a,y\n1,no\n3,yes\n")
    (tmp_path / "input" / "valid.csv").write_text("a\n0.2\n0.9\n")
    (tmp_path / "input" / "test.csv").write_text("a\n0.7\n")
    fit = "def fit_predict(X, y, X_valid, X_test):\n    return X_valid.a.values, X_test.a.values\n"
    (tmp_path / "s.py").write_text(assemble(ctx, fit))
    subprocess.run([sys.executable, "s.py"], cwd=tmp_path, check=True)
    lines = (tmp_path / "submission" / "valid.csv").read_text().split()
    assert lines == ["prediction,proba_no,proba_yes", "no,0.8,0.2", "yes,0.09999999999999998,0.9"]


def test_harness_for_labels_takes_the_most_probable_class_of_probabilities(tmp_path) -> None:
    import subprocess
    import sys

    ctx = TaskContext("p", "y", "binary", "f1", True, ("no", "yes"))
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "train.csv").write_text("a,y\n1,no\n3,yes\n")
    (tmp_path / "input" / "valid.csv").write_text("a\n0.2\n0.9\n")
    (tmp_path / "input" / "test.csv").write_text("a\n0.7\n")
    returns = {  # what fit_predict returns for valid -> the labels written
        "np.column_stack([1 - X_valid.a, X_valid.a]), np.zeros((1, 2))": ["no", "yes"],
        "np.array(['yes', 'no']), np.array(['no'])": ["yes", "no"],  # labels stay labels
        "np.array([[1], [0]]), np.array([[0]])": ["1", "0"],  # one column is not a class each
    }
    for body, labels in returns.items():
        fit = f"def fit_predict(X, y, X_valid, X_test):\n    return {body}\n"
        (tmp_path / "s.py").write_text(assemble(ctx, fit))
        subprocess.run([sys.executable, "s.py"], cwd=tmp_path, check=True)
        lines = (tmp_path / "submission" / "valid.csv").read_text().split()
        assert lines == ["prediction", *labels], body


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
    # Measured failures of the 1.5B model: transformer output used as a DataFrame, a metric on
    # labels that do not exist, a home-made prepare() that calls itself.
    frame = api_hints("AttributeError: 'csr_matrix' object has no attribute 'fillna'\n"
                      "AttributeError: 'numpy.ndarray' object has no attribute 'fillna'")
    assert len(frame) == 1 and "prepare(X, X_valid, X_test)" in frame[0]
    assert any("without labels" in h for h in
               api_hints("NameError: name 'y_valid' is not defined. Did you mean: 'X_valid'?"))
    assert any("never define" in h for h in api_hints(
        "RecursionError: maximum recursion depth exceeded (line 47: def prepare(X, X_valid):)"))
    assert self_reported_metric("train done\nValidation RMSE: 5.25\n") == 5.25
    assert self_reported_metric("nothing") is None
