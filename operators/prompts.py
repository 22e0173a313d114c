"""What every prompt shares: pure functions from the search context to a chat request.

Prompts are laid out for a small local model: the stable part (system text, task preview,
harness contract) comes first and is byte-identical for every prompt of a task, so llama.cpp
reuses its KV cache; the operator-specific part comes last and is short, and is written by
the operator's own module (operators/kinds/).
"""

from __future__ import annotations

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.harness import predict_call
from search.node import Operator
from search.policy import Proposal

SYSTEM = (
    "You are an expert machine learning engineer. You write correct, concise Python for "
    "tabular data with pandas, numpy, scikit-learn and lightgbm. Reply with a one-sentence "
    "plan, then one ```python code block."
)


def returns_text(ctx: TaskContext) -> str:
    if ctx.needs_proba:
        return (f"class probabilities, arrays of shape (rows, {len(ctx.labels)}) with columns in "
                f"the order {list(ctx.labels)} (predict_proba of a model fitted on y)")
    if ctx.task_type == "regression":
        return "predicted numbers (1-D arrays)"
    return f"predicted class labels from {list(ctx.labels)[:10]} (1-D arrays)"


def _prefix(ctx: TaskContext) -> str:
    direction = "higher is better" if ctx.maximize else "lower is better"
    # The harness is described, not shown: shown, a small model copies its file handling.
    return (
        f"# Task\n{ctx.preview.strip()}\n\n"
        + _findings_section(ctx)
        + "# What you write\n"
        "Only the model code: imports, the model's hyperparameters and one function\n"
        "```python\n"
        "PARAMS = {}  # every hyperparameter of the model, e.g. {\"n_estimators\": 300}\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
        "    model = ...(**PARAMS)  # choose a model\n"
        "    model.fit(X, y)\n"
        f"    return {predict_call(ctx)}\n"
        "```\n"
        "The engine has already loaded the data: X (train features, pandas DataFrame), y (the "
        f"`{ctx.target}` column, a Series), X_valid and X_test (features only, no target). It "
        "calls fit_predict and writes the predictions to the submission files itself. "
        "`prepare(X, X_valid, X_test)` is defined for you: it one-hot encodes text columns "
        "and fills missing values, returning three numeric DataFrames with the same columns; "
        "add your own feature engineering before calling it.\n"
        "Rules:\n"
        "- Fit on all of X and y. Return a prediction for every row of X_valid and of X_test, "
        "in order. Never split or drop their rows.\n"
        f"- Return {returns_text(ctx)}. The engine scores them with {ctx.metric} ({direction}) on "
        "hidden labels.\n"
        "- Transform X, X_valid and X_test the same way.\n"
        "- Keep the model's hyperparameters in PARAMS: the engine tunes them.\n"
        "- Do not read or write files. Do not compute the metric yourself.\n"
    )


def _findings_section(ctx: TaskContext) -> str:
    # Inside the stable prefix: identical for every prompt after the analysis, so llama.cpp's
    # prefix cache still covers it.
    if not ctx.findings:
        return ""
    return f"# Data analysis (facts an exploration script printed)\n{ctx.findings}\n\n"


def chat_prompt(ctx: TaskContext, tail: str, proposal: Proposal, max_tokens: int,
                tag: Operator | None = None) -> ChatPrompt:
    """The system text and the stable prefix, then `tail`: the operator's own part."""
    return ChatPrompt(
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": _prefix(ctx) + "\n" + tail},
        ],
        max_tokens=max_tokens,
        temperature=proposal.temperature,
        seed=ctx.seed,
        tag=(tag or proposal.operator).value,
    )


def notes(reflection: str) -> str:
    """What a reflection call said, as a section of the step's own prompt."""
    return f"# Your notes on this code\n{reflection}\n\n" if reflection else ""


CODE_ASK = "Reply again with the model code (imports and fit_predict) in one ```python code block."
SCRIPT_ASK = "Reply again with the script in one ```python code block."
