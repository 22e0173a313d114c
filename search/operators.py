"""Operators: pure functions from search context to a chat prompt, and from a reply to code.

Prompts are laid out for a small local model: the stable part (system text, task preview,
harness contract, code skeleton) comes first and is byte-identical for every prompt of a
task, so llama.cpp reuses its KV cache; the operator-specific part comes last and is short.
The skeleton already reads the inputs and writes the submission: a 1.5B model can fill in a
model, it cannot be trusted to get file handling right.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from search.chat import ChatPrompt
from search.ideas import draft_idea, improve_idea
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal

SYSTEM = (
    "You are an expert machine learning engineer. You write complete, correct Python "
    "scripts for tabular data using pandas, numpy, scikit-learn and lightgbm. Reply with a "
    "plan of one to three sentences, then the whole script in one ```python code block."
)

# Seed 002 / issue 10: API drift that small models trip over, keyed by a marker in the error.
API_HINTS = (
    ("squared", "In scikit-learn >= 1.6 `mean_squared_error` has no `squared=` argument: "
     "use `sklearn.metrics.root_mean_squared_error(y, p)` or `np.sqrt(mean_squared_error(y, p))`."),
    ("early_stopping_rounds", "In lightgbm >= 4 `fit()` takes no `early_stopping_rounds` or "
     "`verbose`: pass `callbacks=[lightgbm.early_stopping(50), lightgbm.log_evaluation(0)]`."),
    ("verbose", "In lightgbm >= 4 `fit()` takes no `verbose=`: drop it or use "
     "`callbacks=[lightgbm.log_evaluation(0)]`."),
    ("sparse", "In scikit-learn >= 1.2 OneHotEncoder uses `sparse_output=` instead of `sparse=`."),
    ("could not convert string to float", "Some columns are text: one-hot encode them with "
     "`pd.get_dummies` on train+valid+test together, or drop them."),
    ("Unknown label type", "The target is continuous: use a regressor, not a classifier."),
    ("append", "`DataFrame.append` was removed in pandas 2: use `pd.concat([a, b])`."),
)


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What the operators know about a task; built once per run by the engine."""

    preview: str
    target: str
    task_type: str
    metric: str
    maximize: bool
    labels: tuple[str, ...] = ()
    needs_proba: bool = False
    seed: int = 0
    max_tokens: int = 1200


_READ = """import numpy as np
import pandas as pd

train = pd.read_csv("input/train.csv")
valid = pd.read_csv("input/valid.csv")  # features only, no target
test = pd.read_csv("input/test.csv")  # features only, no target
TARGET = {target!r}
y = train[TARGET]
X = train.drop(columns=[TARGET])
X_valid, X_test = valid.copy(), test.copy()

# --- preprocessing and model: fit on X, y; transform X_valid and X_test the same way
model = ...
model.fit(X, y)
# --- end

"""

_WRITE = """pd.DataFrame({"prediction": model.predict(X_valid)}).to_csv(
    "submission/valid.csv", index=False)
pd.DataFrame({"prediction": model.predict(X_test)}).to_csv(
    "submission/test.csv", index=False)
"""

_WRITE_PROBA = """def write(X_part, path):
    out = pd.DataFrame({"prediction": model.predict(X_part)})
    for i, label in enumerate(model.classes_):
        out[f"proba_{label}"] = model.predict_proba(X_part)[:, i]
    out.to_csv(path, index=False)

write(X_valid, "submission/valid.csv")
write(X_test, "submission/test.csv")
"""


def skeleton(ctx: TaskContext) -> str:
    """A script that already reads the inputs and writes a valid submission."""
    return _READ.format(target=ctx.target) + (_WRITE_PROBA if ctx.needs_proba else _WRITE)


def _prefix(ctx: TaskContext) -> str:
    direction = "higher is better" if ctx.maximize else "lower is better"
    return (
        f"# Task\n{ctx.preview.strip()}\n\n"
        "# Rules\n"
        "- Read only input/train.csv, input/valid.csv, input/test.csv. valid and test have no "
        "target column; the engine scores your predictions on hidden labels "
        f"({ctx.metric}, {direction}).\n"
        "- Write submission/valid.csv and submission/test.csv: one row per input row, same "
        "order, column `prediction`"
        + (" plus `proba_<label>` columns" if ctx.needs_proba else "")
        + ".\n"
        "- Use only the installed library versions listed above. No internet, no GPU. "
        "Finish in a few minutes.\n\n"
        f"# Skeleton (keep its input and output code)\n```python\n{skeleton(ctx)}```\n"
    )


def _prompt(ctx: TaskContext, tail: str, proposal: Proposal, max_tokens: int) -> ChatPrompt:
    return ChatPrompt(
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": _prefix(ctx) + "\n" + tail},
        ],
        max_tokens=max_tokens,
        temperature=proposal.temperature,
        seed=ctx.seed,
        tag=proposal.operator.value,
    )


def _code_block(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def draft_prompt(ctx: TaskContext, proposal: Proposal, draft_index: int) -> ChatPrompt:
    idea = proposal.hint or draft_idea(draft_index)
    tail = (
        "# Your job\nWrite a first complete solution by filling in the skeleton. "
        f"Use {idea}. Handle missing values and non-numeric columns. Keep it simple."
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def improve_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal) -> ChatPrompt:
    assert proposal.parent_id is not None
    parent = journal.get(proposal.parent_id)
    tried = [c.plan for c in journal.children(parent.node_id) if c.plan][-4:]
    idea = proposal.hint or improve_idea(len(journal.children(parent.node_id)))
    score = "n/a" if parent.metric_raw is None else f"{parent.metric_raw:.5g}"
    history = "".join(f"\n- {_one_line(p)}" for p in tried)
    tail = (
        f"# Current solution (valid {ctx.metric} = {score})\n{_code_block(parent.code)}\n\n"
        + (f"# Already tried from this solution{history}\n\n" if history else "")
        + "# Your job\nImprove the score with ONE targeted change: "
        f"{idea}. Return the whole updated script."
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def debug_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal,
                 last_resort: bool = False) -> ChatPrompt:
    assert proposal.parent_id is not None
    parent = journal.get(proposal.parent_id)
    error = parent.error or f"status {parent.status.value}"
    trace = _tail_lines(parent.stderr_tail, 15)
    hints = api_hints(error + "\n" + parent.stderr_tail)
    ask = (
        "Make the smallest possible edit that fixes this error; change nothing else."
        if last_resort
        else "Fix the bug. Return the whole corrected script."
    )
    tail = (
        f"# Script that failed\n{_code_block(parent.code)}\n\n"
        f"# Error\n{error}\n"
        + (f"```\n{trace}\n```\n" if trace else "")
        + "".join(f"Hint: {h}\n" for h in hints)
        + f"\n# Your job\n{ask}"
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def repair_prompt(prompt: ChatPrompt, reply: str, problem: str) -> ChatPrompt:
    """Re-ask once when a reply has no parseable code, before it costs an execution."""
    messages = [
        *prompt.messages,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": f"{problem} Reply again with the whole script in one "
                                    "```python code block."},
    ]
    return ChatPrompt(messages, prompt.max_tokens, prompt.temperature, prompt.seed + 1,
                      prompt.tag, prompt.stop)


def build_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal) -> ChatPrompt:
    if proposal.operator is Operator.DRAFT:
        return draft_prompt(ctx, proposal, len(journal.draft_nodes))
    if proposal.operator is Operator.IMPROVE:
        return improve_prompt(ctx, proposal, journal)
    if proposal.operator is Operator.DEBUG:
        assert proposal.parent_id is not None
        # The last debug step allowed asks for the smallest edit (issue 10).
        last = journal.debug_depth(proposal.parent_id) >= 2
        return debug_prompt(ctx, proposal, journal, last_resort=last)
    raise ValueError(f"no prompt for operator {proposal.operator}")


@dataclass(frozen=True, slots=True)
class Parsed:
    plan: str
    code: str
    problem: str  # empty when the code parses; else why not, for the repair prompt


_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def parse_reply(text: str) -> Parsed:
    """Split a reply into plan and code; the longest fenced block is the script."""
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if blocks:
        code = max(blocks, key=len)
        plan = text[: text.find("```")].strip()
    else:
        code, plan = text, ""
    code = code.strip() + "\n"
    plan = _one_line(plan, 400)
    if not code.strip():
        return Parsed(plan, "", "Your reply contained no code.")
    try:
        ast.parse(code)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        problem = f"Your code does not parse: SyntaxError: {exc.msg}{where}."
        return Parsed(plan, code if blocks else "", problem)
    if not blocks and "import" not in code:
        return Parsed(plan, "", "Your reply contained no ```python code block.")
    return Parsed(plan, code, "")


def api_hints(error_text: str) -> list[str]:
    return [hint for marker, hint in API_HINTS if marker in error_text]


_SELF_REPORTED = re.compile(
    r"(?i)\b(?:valid\w*|val|rmse|f1\w*|accuracy|auc|score)\b[^\n0-9-]{0,20}(-?\d+(?:\.\d+)?)"
)


def self_reported_metric(stdout: str) -> float | None:
    """The last number a script printed next to a metric-like word; recorded, never trusted."""
    matches = _SELF_REPORTED.findall(stdout)
    return float(matches[-1]) if matches else None


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _tail_lines(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])
