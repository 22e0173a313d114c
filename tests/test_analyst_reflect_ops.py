"""Pure parts of the data analyst and the reflect step: prompts, parsing, findings, policies."""

from __future__ import annotations

import ast
from dataclasses import replace

from operators.analyst import (
    FINDINGS_CHARS,
    analysis_findings,
    analysis_head,
    next_analysis,
    parse_analysis,
    silent_analysis_error,
    trim_findings,
)
from operators.context import TaskContext
from operators.harness import model_part
from operators.kinds import build_prompt, repair_prompt
from operators.kinds.reflect import REFLECT_TOKENS, reflect_prompt
from operators.replies import clean_reflection
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal, make_policy
from tests.helpers import make_node

CTX = TaskContext(preview="Predict strength from 8 columns.", target="strength",
                  task_type="regression", metric="rmse", maximize=False)
FINDINGS = "rows: 618\ncorr cement: 0.5\nskew age: 3.1"


def analysis_node(node_id: str, parent_id: str | None = None, *, ok: bool = True,
                  stdout: str = FINDINGS, step: int = 0) -> Node:
    return Node(node_id=node_id, parent_id=parent_id, operator=Operator.ANALYZE,
                status=Status.OK if ok else Status.BUGGY, step=step,
                code=analysis_head(CTX) + "print(1)\n", code_hash=node_id,
                error="" if ok else "KeyError: 'strenght' (line 4: df['strenght'])",
                stdout_tail=stdout if ok else "")


def test_findings_sit_in_the_stable_prefix_of_every_prompt() -> None:
    ctx = replace(CTX, findings=FINDINGS)
    j = Journal([make_node("a", metric=-5.0), make_node("b", status=Status.BUGGY, step=1)])
    users = [build_prompt(ctx, Proposal(op, parent), j).messages[-1]["content"]
             for op, parent in ((Operator.DRAFT, None), (Operator.IMPROVE, "a"),
                                (Operator.DEBUG, "b"))]
    prefix = users[0][: users[0].index("# Your job")]
    assert all(u.startswith(prefix) for u in users)
    # Right after the task text, before the long rules: one prefix for the KV cache.
    assert prefix.startswith(f"# Task\n{CTX.preview}\n\n# Data analysis")
    assert FINDINGS in prefix and prefix.index(FINDINGS) < prefix.index("Rules:")
    plain = build_prompt(CTX, Proposal(Operator.DRAFT), j).messages[-1]["content"]
    assert "Data analysis" not in plain


def test_analysis_prompt_first_and_retry() -> None:
    first = build_prompt(CTX, Proposal(Operator.ANALYZE), Journal())
    assert first.tag == "analyze"
    text = first.messages[-1]["content"]
    assert "Already defined for you: `df` (input/train.csv)" in text and "`strength`" in text
    assert "numeric.corrwith(df[target])" in text and "fit_predict" not in text
    classes = replace(CTX, task_type="binary", target="label")
    text = build_prompt(classes, Proposal(Operator.ANALYZE), Journal()).messages[-1]["content"]
    assert "share of each class" in text and "numeric.groupby(df[target])" in text
    failed = analysis_node("x", ok=False)
    retry = build_prompt(CTX, Proposal(Operator.ANALYZE, "x"), Journal([failed]))
    text = retry.messages[-1]["content"]
    assert "Analysis script that failed" in text and "KeyError: 'strenght'" in text
    again = repair_prompt(retry, "no code", "Your reply contained no code.")
    assert "the script" in again.messages[-1]["content"]
    assert "fit_predict" not in again.messages[-1]["content"]


def test_parse_analysis() -> None:
    parsed = parse_analysis("Look first.\n```python\nprint(df.shape)\n```", CTX)
    assert parsed.problem == "" and parsed.plan == "Look first."
    # The head loads the data: a script that uses df without reading it runs.
    assert parsed.code == analysis_head(CTX) + "print(df.shape)\n"
    assert "target = 'strength'" in parsed.code
    ast.parse(parsed.code)
    # A reply that repeats the imports or the whole head does not get them twice.
    for repeated in ("import numpy as np\nimport pandas as pd\n", analysis_head(CTX)):
        twice = parse_analysis(f"```python\n{repeated}print(1)\n```", CTX)
        assert twice.code.count("import pandas") == 1 and twice.code.count("read_csv") == 1
    # Notebook-style bare expressions show their values; prints, strings and nested
    # expressions stay as they are.
    shown = parse_analysis("```python\n'about'\ndf.shape\nprint(1)\nfor c in df:\n"
                           "    c\n(df[target]\n .skew())\n```", CTX).code
    assert shown.endswith("'about'\n_show(df.shape)\nprint(1)\nfor c in df:\n    c\n"
                          "_show((df[target]\n .skew()))\n")
    assert "def _show(value):" in analysis_head(CTX)
    # A retry's reply copies the wrapped script it was shown: no second wrapping.
    again = parse_analysis(f"```python\n{model_part(shown)}```", CTX).code
    assert again == shown
    assert "SyntaxError" in parse_analysis("```python\nprint(\n```", CTX).problem
    assert parse_analysis("", CTX).problem == "Your reply contained no code."
    assert parse_analysis("```python\nX = RandomForestRegressor()\n```", CTX).code.count(
        "from sklearn.ensemble import RandomForestRegressor") == 1


def test_silent_analysis_fails() -> None:
    assert silent_analysis_error(" \n\n") == "the analysis script printed nothing"
    assert silent_analysis_error("rows: 618\n") == ""


def test_trim_findings_keeps_whole_lines_within_the_budget() -> None:
    stdout = "\n\n".join(f"fact {i}: " + "x" * 90 for i in range(40)) + "\n" + "y" * 500
    trimmed = trim_findings(stdout)
    assert len(trimmed) <= FINDINGS_CHARS + len("(further output cut)")
    assert trimmed.endswith("(further output cut)")
    assert "\n\n" not in trimmed and trimmed.startswith("fact 0: ")
    assert all(len(line) <= 200 for line in trim_findings("z" * 1000).splitlines())
    assert trim_findings("a\n\nb\n") == "a\nb"


def test_next_analysis_first_one_retry_then_give_up() -> None:
    j = Journal()
    first = next_analysis(j)
    assert first is not None and first.operator is Operator.ANALYZE and first.parent_id is None
    j.add(analysis_node("a1", ok=False))
    retry = next_analysis(j)
    assert retry is not None and retry.parent_id == "a1"
    assert analysis_findings(j) == ""
    j.add(analysis_node("a2", "a1", ok=False, step=1))
    assert next_analysis(j) is None
    ok = Journal([analysis_node("b1")])
    assert next_analysis(ok) is None and analysis_findings(ok) == FINDINGS
    lost = replace(analysis_node("c1", ok=False), status=Status.LOST)
    again = next_analysis(Journal([lost]))
    assert again is not None and again.parent_id is None  # a lost try does not count


def test_policies_never_debug_or_count_an_analysis_node() -> None:
    nodes = [analysis_node("an", ok=False), make_node("d1", metric=0.5, step=1),
             make_node("d2", status=Status.BUGGY, step=2)]
    j = Journal(nodes)
    assert [n.node_id for n in j.buggy_leaves] == ["d2"]
    for name in ("greedy", "mcts"):
        policy = make_policy(name, seed=0, num_drafts=2, debug_prob=1.0)
        proposals = [policy.propose(j, 1, {})[0] for _ in range(30)]
        assert all(p.parent_id != "an" for p in proposals), name
    # Three drafts are wanted and two exist: the analysis root is no draft, so one more comes.
    greedy = make_policy("greedy", seed=0, num_drafts=3)
    assert greedy.propose(j, 1, {})[0].operator is Operator.DRAFT
    mcts = make_policy("mcts", seed=0, num_drafts=3)
    assert mcts.propose(j, 1, {})[0].operator is Operator.DRAFT


def test_reflect_prompts_and_reflection_in_the_next_prompt() -> None:
    failed = make_node("b", status=Status.BUGGY)
    failed = replace(failed, error="KeyError: 'target_typo'")
    j = Journal([make_node("a", metric=-5.0, step=1), failed])
    debug = reflect_prompt(CTX, Proposal(Operator.DEBUG, "b"), j)
    assert debug.tag == "reflect" and debug.max_tokens == REFLECT_TOKENS
    text = debug.messages[-1]["content"]
    assert "KeyError: 'target_typo'" in text and "Do not write code" in text
    improve = reflect_prompt(CTX, Proposal(Operator.IMPROVE, "a"), j)
    assert "valid rmse = -5" in improve.messages[-1]["content"]
    assert "limits this score" in improve.messages[-1]["content"]
    # It plans the very change the improve step will be asked for, not a competing one.
    change = build_prompt(CTX, Proposal(Operator.IMPROVE, "a"), j).messages[-1]["content"]
    idea = change.split("ONE targeted change: ")[1].split(". Return")[0]
    assert f"The next step will make this change: {idea}." in improve.messages[-1]["content"]
    hinted = reflect_prompt(CTX, Proposal(Operator.IMPROVE, "a", idea="drop column x"), j)
    assert "make this change: drop column x." in hinted.messages[-1]["content"]
    # The reflection prompt shares the code prompts' prefix (same KV cache).
    code_prompt = build_prompt(CTX, Proposal(Operator.DEBUG, "b"), j)
    head = code_prompt.messages[-1]["content"].split("# Model code that failed")[0]
    assert text.startswith(head)
    note = "Use the column y, not target_typo."
    for op, parent in ((Operator.DEBUG, "b"), (Operator.IMPROVE, "a")):
        with_note = build_prompt(CTX, Proposal(op, parent), j, reflection=note)
        body = with_note.messages[-1]["content"]
        assert f"# Your notes on this code\n{note}\n" in body
        assert body.index(note) < body.index("# Your job")
        assert "Your notes" not in build_prompt(CTX, Proposal(op, parent), j).messages[-1][
            "content"]


def test_clean_reflection() -> None:
    text = "The column is wrong.\n```python\nprint(1)\n```\nUse   y.\n" + "z" * 1000
    cleaned = clean_reflection(text)
    assert cleaned.startswith("The column is wrong. Use y.")
    assert "print" not in cleaned and len(cleaned) <= 600
    assert clean_reflection("```python\nx = 1\n```") == ""
