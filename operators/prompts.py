"""Prompts: pure functions from the search context to a chat request.

Prompts are laid out for a small local model: the stable part (system text, task preview,
harness contract) comes first and is byte-identical for every prompt of a task, so llama.cpp
reuses its KV cache; the operator-specific part comes last and is short.
"""

from __future__ import annotations

import difflib

from operators.analyst import analysis_prompt
from operators.context import TaskContext
from operators.failures import code_block, failure_section
from operators.harness import model_part, predict_call
from operators.memory import Case, nearest_fix, shortened
from operators.replies import one_line
from search.chat import ChatPrompt
from search.ideas import draft_idea, improve_idea
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal
from search.sela import STAGE_NAMES, STAGES

SYSTEM = (
    "You are an expert machine learning engineer. You write correct, concise Python for "
    "tabular data with pandas, numpy, scikit-learn and lightgbm. Reply with a one-sentence "
    "plan, then one ```python code block."
)

INSIGHTS_ASKED = 5  # SELA expands 5 children per node: one idea per child
FIX_LINES = 16  # of a remembered fix's diff: the prompt stays short


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


def _prompt(ctx: TaskContext, tail: str, proposal: Proposal, max_tokens: int,
            tag: Operator | None = None) -> ChatPrompt:
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


def draft_prompt(ctx: TaskContext, proposal: Proposal, draft_index: int) -> ChatPrompt:
    idea = proposal.idea or draft_idea(draft_index)
    tail = (
        f"# Your job\nWrite the model code (imports and fit_predict) using {idea}. "
        "Keep it simple and correct."
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def recalled_case(ctx: TaskContext, proposal: Proposal) -> Case:
    """The retrieved case a recall step adapts (its id is the proposal's idea)."""
    for case in ctx.cases:
        if case.case_id == proposal.idea:
            return case
    raise ValueError(f"recall of case {proposal.idea!r}, which was not retrieved for this task")


def recall_prompt(ctx: TaskContext, proposal: Proposal) -> ChatPrompt:
    """Case-based drafting (seed 004): adapt working code of the nearest earlier task."""
    case = recalled_case(ctx, proposal)
    tail = (
        f"# Working model code from a similar task ({case.task_type}, {case.metric})\n"
        f"{code_block(shortened(case.code))}\n\n"
        "# Your job\nAdapt this code to the task above: keep its model, PARAMS and approach; "
        "change only what this task's target and predictions need (prepare() already handles "
        "the columns). If nothing needs to change, return it unchanged. Return the whole "
        "model code."
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def _current(ctx: TaskContext, journal: Journal, parent_id: str) -> str:
    """The improve context: the parent's code and score, and what siblings already tried."""
    parent = journal.get(parent_id)
    tried = [c.plan for c in journal.children(parent.node_id) if c.plan][-4:]
    score = "n/a" if parent.metric_raw is None else f"{parent.metric_raw:.5g}"
    history = "".join(f"\n- {one_line(p)}" for p in tried)
    return (
        f"# Current model code (valid {ctx.metric} = {score})\n"
        f"{code_block(model_part(parent.code))}\n\n"
        + (f"# Already tried from this code{history}\n\n" if history else "")
    )


def _notes(reflection: str) -> str:
    return f"# Your notes on this code\n{reflection}\n\n" if reflection else ""


def _parent(proposal: Proposal) -> str:
    assert proposal.parent_id is not None
    return proposal.parent_id


def improve_change(proposal: Proposal, journal: Journal) -> str:
    """The change an improve step is asked for: the policy's hint, else the next idea of the
    pool (siblings counted, so concurrent steps on one parent try different things)."""
    return proposal.idea or improve_idea(len(journal.children(_parent(proposal))))


def improve_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal,
                   reflection: str = "") -> ChatPrompt:
    tail = (
        _current(ctx, journal, _parent(proposal))
        + _notes(reflection)
        + "# Your job\nImprove the score with ONE targeted change: "
        f"{improve_change(proposal, journal)}. Return the whole updated model code."
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def debug_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal,
                 last_resort: bool = False, reflection: str = "") -> ChatPrompt:
    assert proposal.parent_id is not None
    ask = (
        "Make the smallest possible edit that fixes this error; change nothing else."
        if last_resort
        else "Fix the bug. Return the whole corrected model code."
    )
    tail = (
        failure_section(journal, proposal.parent_id)
        + ("\n" + _notes(reflection) if reflection else "")
        + _fix_section(ctx, journal.get(proposal.parent_id).error)
        + f"\n# Your job\n{ask}"
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def _fix_section(ctx: TaskContext, error: str) -> str:
    """The edit that cured the same error in an earlier run (--memory), as a short diff."""
    fix = nearest_fix(error, ctx.fingerprint, ctx.fixes) if ctx.fixes and error else None
    if fix is None:
        return ""
    diff = [line for line in difflib.unified_diff(
        fix.failed.splitlines(), fix.fixed.splitlines(), lineterm="", n=0)
        if not line.startswith(("---", "+++", "@@"))][:FIX_LINES]
    if not diff:
        return ""
    return ("\n# The same error was fixed in an earlier run by this edit\n"
            + "```diff\n" + "\n".join(diff) + "\n```\n")


REFLECT_TOKENS = 150  # three sentences; a longer reflection only delays the code call


def reflect_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal) -> ChatPrompt:
    """Reflexion (seed 001): before a debug or improve step, ask what failed or what limits the
    score and what to change, in words; the answer goes into the step's own prompt."""
    assert proposal.parent_id is not None
    if proposal.operator is Operator.DEBUG:
        tail = (failure_section(journal, proposal.parent_id)
                + "\n# Your job\nDo not write code. In at most three short sentences: what "
                "caused this error, and what exactly must change to fix it?")
    else:
        # The step itself is told which change to make (the idea pools keep siblings apart),
        # so the reflection plans that change instead of proposing a competing one.
        tail = (_current(ctx, journal, proposal.parent_id)
                + "# Your job\nThe next step will make this change: "
                f"{improve_change(proposal, journal)}. Do not write code. In at most three "
                "short sentences: what limits this score, and how exactly should this change "
                "be made to this code (which columns, parameters, values)?")
    return _prompt(ctx, tail, proposal, REFLECT_TOKENS, tag=Operator.REFLECT)


CODE_ASK = "Reply again with the model code (imports and fit_predict) in one ```python code block."
SCRIPT_ASK = "Reply again with the script in one ```python code block."
INSIGHTS_ASK = f"Reply again with only a JSON list of {INSIGHTS_ASKED} short strings."


def repair_prompt(prompt: ChatPrompt, reply: str, problem: str,
                  ask: str | None = None) -> ChatPrompt:
    """Re-ask once when a reply has no usable code (or ideas), before it costs an execution."""
    if ask is None:
        ask = SCRIPT_ASK if prompt.tag == Operator.ANALYZE.value else CODE_ASK
    messages = [
        *prompt.messages,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": f"{problem} {ask}"},
    ]
    return ChatPrompt(messages, prompt.max_tokens, prompt.temperature, prompt.seed + 1,
                      prompt.tag, prompt.stop)


def insights_prompt(ctx: TaskContext, proposal: Proposal) -> ChatPrompt:
    """SELA's insight proposer, one stage per request (`proposal.stage` names the stage): short
    replies a small model gets right, and the three stages are asked for in parallel."""
    about = dict(STAGES).get(proposal.stage, "")
    tail = (
        f"# Your job\nDo not write code now. Propose {INSIGHTS_ASKED} different, concrete ideas "
        f"for the {proposal.stage} step of a solution to this task"
        + (f" ({about})" if about else "")
        + ". Each idea is one short sentence that fits the data above and can be done with "
        "pandas, numpy, scikit-learn and lightgbm (nothing else is installed).\n"
        f"Reply with only a JSON list of {INSIGHTS_ASKED} strings, e.g. "
        '["first idea", "second idea"].'
    )
    return _prompt(ctx, tail, proposal, 300)



def sela_prompt(ctx: TaskContext, proposal: Proposal) -> ChatPrompt:
    """A SELA rollout: one script that follows the insight chosen at each stage of the path;
    stages past the path's end are left to the model, as SELA leaves them to its default plan."""
    insights = proposal.insights
    steps = "".join(
        f"- {name}: {insights[i] if i < len(insights) else 'your choice; keep it simple'}\n"
        for i, name in enumerate(STAGE_NAMES)
    )
    tail = (
        "# Your job\nWrite the model code (imports and fit_predict) that follows this plan:\n"
        f"{steps}Keep it simple and correct."
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def build_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal,
                 reflection: str = "") -> ChatPrompt:
    if proposal.operator is Operator.DRAFT:
        return draft_prompt(ctx, proposal, len(journal.draft_nodes))
    if proposal.operator is Operator.RECALL:
        return recall_prompt(ctx, proposal)
    if proposal.operator is Operator.IMPROVE:
        return improve_prompt(ctx, proposal, journal, reflection)
    if proposal.operator is Operator.DEBUG:
        assert proposal.parent_id is not None
        # The last debug step allowed asks for the smallest edit (issue 10).
        last = journal.debug_depth(proposal.parent_id) >= 2
        return debug_prompt(ctx, proposal, journal, last_resort=last, reflection=reflection)
    if proposal.operator is Operator.ANALYZE:
        return analysis_prompt(ctx, proposal, journal)
    if proposal.operator is Operator.INSIGHTS:
        return insights_prompt(ctx, proposal)
    if proposal.operator is Operator.SELA:
        return sela_prompt(ctx, proposal)
    raise ValueError(f"no prompt for operator {proposal.operator}")
