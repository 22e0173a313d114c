"""Operators: pure functions from search context to a chat prompt, and from a reply to code.

Prompts are laid out for a small local model: the stable part (system text, task preview,
harness contract) comes first and is byte-identical for every prompt of a task, so llama.cpp
reuses its KV cache; the operator-specific part comes last and is short.

The model writes only `fit_predict(X, y, X_valid, X_test)`; the engine wraps it in a fixed
harness that reads the inputs and writes the submission (a 1.5B model can fill in a model, it
cannot be trusted with file handling, and it confuses the hidden valid split with a split of
its own). The node's code is the assembled script, so `best/solution.py` runs on its own. A
reply that is a whole script writing the submission itself is accepted as it is.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from search.chat import ChatPrompt
from search.ideas import draft_idea, improve_idea
from search.imports import fix_imports
from search.journal import Journal
from search.measure import HARNESS_MEASURE
from search.node import Operator, Status
from search.policy import Proposal

SYSTEM = (
    "You are an expert machine learning engineer. You write correct, concise Python for "
    "tabular data with pandas, numpy, scikit-learn and lightgbm. Reply with a one-sentence "
    "plan, then one ```python code block."
)

MODEL_START = "# ---- model code (written by the LLM) ----"
MODEL_END = "# ---- end of model code ----"

_NOT_A_FRAME = (
    "After a scikit-learn transformer (OneHotEncoder, StandardScaler, SimpleImputer, ...) the data "
    "is a numpy array or sparse matrix, not a DataFrame. Use `X, X_valid, X_test = prepare(X, "
    "X_valid, X_test)` instead (it already one-hot encodes and fills missing values), and do "
    "any pandas work before it.")
_NO_LABELS = (
    "X_valid and X_test come without labels (the engine scores them on hidden labels): delete "
    "every metric computation and return the predictions.")

# Seed 002 / issue 10: API drift that small models trip over, keyed by a marker in the error.
API_HINTS = (
    ("squared", "In scikit-learn >= 1.6 `mean_squared_error` has no `squared=` argument: "
     "use `sklearn.metrics.root_mean_squared_error(y, p)` or `np.sqrt(mean_squared_error(y, p))`; "
     "better, compute no metric at all: the engine scores the predictions."),
    ("early_stopping_rounds", "In lightgbm >= 4 `fit()` takes no `early_stopping_rounds` or "
     "`verbose`: pass `callbacks=[lightgbm.early_stopping(50), lightgbm.log_evaluation(0)]`."),
    ("verbose", "In lightgbm >= 4 `fit()` takes no `verbose=`: drop it or use "
     "`callbacks=[lightgbm.log_evaluation(0)]`."),
    ("sparse", "In scikit-learn >= 1.2 OneHotEncoder uses `sparse_output=` instead of `sparse=`."),
    ("could not convert string to float", "Some columns are text: one-hot encode them with "
     "`pd.get_dummies` on train+valid+test together, or drop them."),
    ("Unknown label type", "The target is continuous: use a regressor, not a classifier."),
    ("append", "`DataFrame.append` was removed in pandas 2: use `pd.concat([a, b])`."),
    ("HistGradientBoosting", "HistGradientBoosting models take `max_iter`, not `n_estimators`."),
    ("non-iterable NoneType", "fit_predict must end with `return valid_pred, test_pred`."),
    ("feature names should match", "Transform X_valid and X_test exactly like X: call "
     "`X, X_valid, X_test = prepare(X, X_valid, X_test)` after your feature engineering."),
    ("number of features in data", "Transform X_valid and X_test exactly like X: call "
     "`X, X_valid, X_test = prepare(X, X_valid, X_test)` after your feature engineering."),
    ("unknown categories", "Use `prepare(X, X_valid, X_test)` instead of a OneHotEncoder, or "
     "pass `handle_unknown='ignore'`."),
    ("at least one dataset", "lightgbm early stopping needs `eval_set=[(X_val, y_val)]` in "
     "fit(); or drop the early_stopping callback."),
    ("cannot import name 'HistGradientBoosting", "HistGradientBoosting models live in "
     "scikit-learn: `from sklearn.ensemble import HistGradientBoostingRegressor`."),
    ("cannot import name", "That name does not exist in the installed version: import it from "
     "the right module or use another approach."),
    ("is not defined", "Define or import every name you use inside the model code."),
    # Failures measured in lite-suite runs (2026-11-24) that the hints above missed.
    *((marker, _NOT_A_FRAME) for marker in (
        "'numpy.ndarray' object has no attribute", "'csr_matrix' object has no attribute",
        "cannot concatenate object of type '<class 'scipy.sparse",
        "cannot concatenate object of type '<class 'numpy.ndarray")),
    *((f"name '{name}' is not defined", _NO_LABELS) for name in (
        "y_valid", "y_val", "y_test", "y_true")),
    ("def prepare(", "`prepare` is already defined by the engine: call it, and never define a "
     "function named `prepare` yourself."),
    ("Parameter grid for parameter", "Every value of a GridSearchCV param_grid must be a list "
     "(`{'max_depth': [3, 5]}`); fixed settings go into the estimator itself."),
)


# SELA's stages (Chi et al. 2024), in the order a script runs them: the levels of its tree. Each
# has what an idea for it is about, for the insights prompt.
STAGES: tuple[tuple[str, str], ...] = (
    ("data preprocessing", "missing values, outliers, encoding of text columns, scaling"),
    ("feature engineering", "new features from the columns: ratios, products, aggregates, "
                            "binning, transforms"),
    ("model training", "the model family, its main hyperparameters, ensembling"),
)
STAGE_NAMES: tuple[str, ...] = tuple(name for name, _ in STAGES)
INSIGHTS_ASKED = 5  # SELA expands 5 children per node: one idea per child
MAX_INSIGHTS = 10
_INSIGHT_CHARS = 240


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
    max_tokens: int = 900  # a fit_predict fits in ~400 tokens; the cap bounds rambling replies
    findings: str = ""  # --analyst: facts the exploration script printed (see analysis_findings)


_HEAD = '''"""Solution script: the engine's harness around LLM-written model code.

Run it in a folder holding input/ (train.csv, valid.csv, test.csv); it writes
submission/valid.csv and submission/test.csv.
"""
import os
import re

import numpy as np
import pandas as pd

TARGET = __TARGET__
train = pd.read_csv("input/train.csv")
X = train.drop(columns=[TARGET])
y = train[TARGET]
X_valid = pd.read_csv("input/valid.csv")  # no target: predict every row
X_test = pd.read_csv("input/test.csv")  # no target: predict every row


'''

# The harness's feature preparation; the non-LLM benchmark baselines exec it in-process, so they
# see exactly the features every candidate gets from `prepare()`.
PREPARE_SOURCE = '''def prepare(X, X_valid, X_test, max_levels=20):
    """One-hot encode text columns and fill missing values the same way for all three
    frames; returns three numeric DataFrames with identical columns."""
    frames = pd.concat([X, X_valid, X_test], keys=["train", "valid", "test"])
    text = list(frames.select_dtypes(exclude="number").columns)
    for col in text:  # ids and free text would explode the one-hot: keep common values
        common = frames[col].value_counts().index[:max_levels]
        frames[col] = frames[col].where(frames[col].isin(common), "other")
    frames = pd.get_dummies(frames, columns=text, dummy_na=True, dtype=float)
    frames = frames.fillna(frames.loc["train"].median(numeric_only=True)).fillna(0.0)
    names, seen = [], set()
    for col in frames.columns:  # lightgbm rejects some characters in feature names
        name = re.sub(r"[^0-9A-Za-z_]", "_", str(col))
        while name in seen:
            name += "_"
        seen.add(name)
        names.append(name)
    frames.columns = names
    return frames.loc["train"], frames.loc["valid"], frames.loc["test"]
'''


def harness_head(ctx: TaskContext) -> str:
    return (_HEAD + PREPARE_SOURCE).replace("__TARGET__", repr(ctx.target))


def harness_tail(ctx: TaskContext) -> str:
    labels = f"LABELS = {list(ctx.labels)!r}\n" if ctx.needs_proba else ""
    if ctx.needs_proba:
        body = (
            "    if pred.ndim == 1:  # binary: probability of LABELS[1]\n"
            "        pred = np.column_stack([1 - pred, pred])\n"
            "    if pred.ndim != 2 or pred.shape[1] != len(LABELS):\n"
            "        raise ValueError(f\"fit_predict must return probabilities of shape \"\n"
            "                         f\"(rows, {len(LABELS)}) for {path}; got {pred.shape}\")\n"
            "    out = pd.DataFrame({\"prediction\": np.asarray(LABELS)[pred.argmax(axis=1)]})\n"
            "    for i, label in enumerate(LABELS):\n"
            "        out[f\"proba_{label}\"] = pred[:, i]\n"
        )
    else:
        body = "    out = pd.DataFrame({\"prediction\": pred.reshape(len(pred), -1)[:, 0]})\n"
    return (
        f"\n{labels}\n"
        "def _treeml_frame(pred, rows, path):\n"
        "    pred = np.asarray(pred)\n"
        "    if len(pred) != rows:\n"
        "        raise ValueError(f\"fit_predict returned {len(pred)} predictions for {path}; \"\n"
        "                         f\"expected {rows}: predict every row, never split \"\n"
        "                         \"X_valid or X_test\")\n"
        + body
        + "    return out\n\n\n"
        "def _write(pred, rows, path):\n"
        "    _treeml_frame(pred, len(rows), path).to_csv(path, index=False)\n"
        + HARNESS_MEASURE
        + "\n\n_treeml_measure = _TreemlMeasure(len(X), len(X_valid), len(X_test))\n"
        "_treeml_start = _treeml_time.perf_counter()\n"
        "_treeml_sys.setprofile(_treeml_measure.hook)\n"
        "try:\n"
        "    valid_pred, test_pred = fit_predict(X.copy(), y.copy(), X_valid.copy(), "
        "X_test.copy())\n"
        "finally:\n"
        "    _treeml_sys.setprofile(None)\n"
        "_treeml_seconds = _treeml_time.perf_counter() - _treeml_start\n"
        "os.makedirs(\"submission\", exist_ok=True)\n"
        "_write(valid_pred, X_valid, \"submission/valid.csv\")\n"
        "_write(test_pred, X_test, \"submission/test.csv\")\n"
        "_treeml_measure.report(_treeml_seconds, valid_pred)\n"
    )


def assemble(ctx: TaskContext, model_code: str) -> str:
    """The runnable script: harness head, the model's code, harness tail."""
    return (f"{harness_head(ctx)}\n{MODEL_START}\n{model_code.strip()}\n{MODEL_END}\n"
            f"{harness_tail(ctx)}")


def model_part(code: str) -> str:
    """The LLM-written part of an assembled script (a whole-script reply is all model code)."""
    if MODEL_START in code and MODEL_END in code:
        return code.split(MODEL_START, 1)[1].split(MODEL_END, 1)[0].strip() + "\n"
    return code


def _returns(ctx: TaskContext) -> str:
    if ctx.needs_proba:
        return (f"class probabilities, arrays of shape (rows, {len(ctx.labels)}) with columns in "
                f"the order {list(ctx.labels)} (predict_proba of a model fitted on y)")
    if ctx.task_type == "regression":
        return "predicted numbers (1-D arrays)"
    return f"predicted class labels from {list(ctx.labels)[:10]} (1-D arrays)"


def _predict_call(ctx: TaskContext) -> str:
    method = "predict_proba" if ctx.needs_proba else "predict"
    return f"model.{method}(X_valid), model.{method}(X_test)"


def baseline_code(ctx: TaskContext) -> str:
    """The engine's own root: LightGBM with default settings on `prepare`d features."""
    kind = "LGBMRegressor" if ctx.task_type == "regression" else "LGBMClassifier"
    return (
        "import lightgbm as lgb\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
        f"    model = lgb.{kind}(random_state=0, verbose=-1)\n"
        "    model.fit(X, y)\n"
        f"    return {_predict_call(ctx)}\n"
    )


_ENSEMBLE = """import numpy as np

# The members' model code, each run in its own namespace so their names cannot clash.
MEMBERS = __MEMBERS__


def _member(source, X, y, X_valid, X_test):
    scope = {"prepare": prepare, "np": np, "pd": pd, "__name__": "member"}
    exec(compile(source, "member", "exec"), scope)
    return scope["fit_predict"](X.copy(), y.copy(), X_valid.copy(), X_test.copy())


def _combine(preds):
__COMBINE__

def fit_predict(X, y, X_valid, X_test):
    outs = [_member(source, X, y, X_valid, X_test) for source in MEMBERS]
    return _combine([v for v, _ in outs]), _combine([t for _, t in outs])
"""

_MEAN = """    columns = [np.asarray(p, dtype=float).reshape(len(p), -1)[:, 0] for p in preds]
    return np.mean(columns, axis=0)
"""

_MEAN_PROBA = """    arrays = []
    for p in preds:  # binary members may return the positive class's probability alone
        p = np.asarray(p, dtype=float)
        arrays.append(np.column_stack([1 - p, p]) if p.ndim == 1 else p)
    return np.mean(arrays, axis=0)
"""

# Majority vote; a tie goes to the first member, the best one by valid score.
_VOTE = """    labels = [list(np.asarray(p).ravel()) for p in preds]
    out = []
    for row in zip(*labels):
        keys = [str(v) for v in row]
        top = max(keys.count(k) for k in keys)
        out.append(row[0] if keys.count(keys[0]) == top else
                   next(v for v, k in zip(row, keys) if keys.count(k) == top))
    return np.asarray(out, dtype=object)
"""


def ensemble_vote(ctx: TaskContext) -> bool:
    """Class labels cannot be averaged: such tasks ensemble by a vote of three."""
    return ctx.task_type != "regression" and not ctx.needs_proba


def ensemble_code(ctx: TaskContext, member_codes: list[str]) -> str:
    """The assembled script of an engine-written ensemble of model codes (see search/ensemble)."""
    combine = _VOTE if ensemble_vote(ctx) else _MEAN_PROBA if ctx.needs_proba else _MEAN
    sources = "[\n" + "".join(f"    {model_part(c)!r},\n" for c in member_codes) + "]"
    model = _ENSEMBLE.replace("__MEMBERS__", sources).replace("__COMBINE__", combine.rstrip("\n"))
    return assemble(ctx, model)


def _prefix(ctx: TaskContext) -> str:
    direction = "higher is better" if ctx.maximize else "lower is better"
    # The harness is described, not shown: shown, a small model copies its file handling.
    return (
        f"# Task\n{ctx.preview.strip()}\n\n"
        + _findings_section(ctx)
        + "# What you write\n"
        "Only the model code: imports and one function\n"
        "```python\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
        "    model = ...  # choose and configure a model\n"
        "    model.fit(X, y)\n"
        f"    return {_predict_call(ctx)}\n"
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
        f"- Return {_returns(ctx)}. The engine scores them with {ctx.metric} ({direction}) on "
        "hidden labels.\n"
        "- Transform X, X_valid and X_test the same way.\n"
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


def _code_block(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def draft_prompt(ctx: TaskContext, proposal: Proposal, draft_index: int) -> ChatPrompt:
    idea = proposal.hint or draft_idea(draft_index)
    tail = (
        f"# Your job\nWrite the model code (imports and fit_predict) using {idea}. "
        "Keep it simple and correct."
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


def _current(ctx: TaskContext, journal: Journal, parent_id: str) -> str:
    """The improve context: the parent's code and score, and what siblings already tried."""
    parent = journal.get(parent_id)
    tried = [c.plan for c in journal.children(parent.node_id) if c.plan][-4:]
    score = "n/a" if parent.metric_raw is None else f"{parent.metric_raw:.5g}"
    history = "".join(f"\n- {_one_line(p)}" for p in tried)
    return (
        f"# Current model code (valid {ctx.metric} = {score})\n"
        f"{_code_block(model_part(parent.code))}\n\n"
        + (f"# Already tried from this code{history}\n\n" if history else "")
    )


def _failure(journal: Journal, parent_id: str, what: str = "Model code") -> str:
    """The debug context: the failed code, its error, the traceback's end and API hints."""
    parent = journal.get(parent_id)
    error = parent.error or f"status {parent.status.value}"
    trace = _tail_lines(parent.stderr_tail, 12)
    hints = api_hints(error + "\n" + parent.stderr_tail)
    return (
        f"# {what} that failed\n{_code_block(model_part(parent.code))}\n\n"
        f"# Error\n{error}\n"
        + (f"```\n{trace}\n```\n" if trace and trace not in error else "")
        + "".join(f"Hint: {h}\n" for h in hints)
    )


def _notes(reflection: str) -> str:
    return f"# Your notes on this code\n{reflection}\n\n" if reflection else ""


def _parent(proposal: Proposal) -> str:
    assert proposal.parent_id is not None
    return proposal.parent_id


def improve_change(proposal: Proposal, journal: Journal) -> str:
    """The change an improve step is asked for: the policy's hint, else the next idea of the
    pool (siblings counted, so concurrent steps on one parent try different things)."""
    return proposal.hint or improve_idea(len(journal.children(_parent(proposal))))


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
        _failure(journal, proposal.parent_id)
        + ("\n" + _notes(reflection) if reflection else "")
        + f"\n# Your job\n{ask}"
    )
    return _prompt(ctx, tail, proposal, ctx.max_tokens)


REFLECT_TOKENS = 150  # three sentences; a longer reflection only delays the code call


def reflect_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal) -> ChatPrompt:
    """Reflexion (seed 001): before a debug or improve step, ask what failed or what limits the
    score and what to change, in words; the answer goes into the step's own prompt."""
    assert proposal.parent_id is not None
    if proposal.operator is Operator.DEBUG:
        tail = (_failure(journal, proposal.parent_id)
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


def clean_reflection(text: str) -> str:
    """A reflection as one short paragraph: code blocks dropped (a small model writes them
    anyway), whitespace collapsed, at most 600 characters."""
    return _one_line(_FENCED.sub(" ", text), 600)


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
    """SELA's insight proposer, one stage per request (`proposal.hint` names the stage): short
    replies a small model gets right, and the three stages are asked for in parallel."""
    about = dict(STAGES).get(proposal.hint, "")
    tail = (
        f"# Your job\nDo not write code now. Propose {INSIGHTS_ASKED} different, concrete ideas "
        f"for the {proposal.hint} step of a solution to this task"
        + (f" ({about})" if about else "")
        + ". Each idea is one short sentence that fits the data above and can be done with "
        "pandas, numpy, scikit-learn and lightgbm (nothing else is installed).\n"
        f"Reply with only a JSON list of {INSIGHTS_ASKED} strings, e.g. "
        '["first idea", "second idea"].'
    )
    return _prompt(ctx, tail, proposal, 300)


def encode_path(path: tuple[int, ...], insights: tuple[str, ...]) -> str:
    """A SELA rollout's hint: the insight chosen at each stage, by index and by text."""
    return json.dumps({"path": list(path), "insights": list(insights)}, ensure_ascii=False)


def decode_path(hint: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The (path, insights) of a rollout's hint; a hint that is not one is the empty path."""
    try:
        data = json.loads(hint, strict=False)
        path = tuple(int(i) for i in data["path"])
        insights = tuple(str(t) for t in data["insights"])
    except (ValueError, TypeError, KeyError):
        return (), ()
    return (path, insights) if len(path) == len(insights) else ((), ())


def sela_prompt(ctx: TaskContext, proposal: Proposal) -> ChatPrompt:
    """A SELA rollout: one script that follows the insight chosen at each stage of the path;
    stages past the path's end are left to the model, as SELA leaves them to its default plan."""
    _, insights = decode_path(proposal.hint)
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


# ---- the data analyst (seed 003) ----------------------------------------------------------

ANALYST_SYSTEM = (
    "You are a careful data analyst. You write short, correct pandas scripts that print "
    "facts about a dataset. Reply with one ```python code block."
)
_ANALYSIS_IMPORTS = "import numpy as np\nimport pandas as pd\n"
FINDINGS_CHARS = 1500  # what the findings may add to every later prompt
ANALYSIS_TOKENS = 700


_SHOW = "_show"


def analysis_head(ctx: TaskContext) -> str:
    """What every exploration script starts with. Loading is done for the model: in lite-suite
    runs (2026-11-24) 4 of 11 scripts the 1.5B model wrote used `df` without reading it."""
    return (
        f"{_ANALYSIS_IMPORTS}\n"
        'df = pd.read_csv("input/train.csv")\n'
        f"target = {ctx.target!r}\n"
        'numeric = df.select_dtypes("number").drop(columns=[target], errors="ignore")\n\n\n'
        f"def {_SHOW}(value):  # a bare expression shows its value, as in a notebook\n"
        "    if value is not None:\n"
        "        print(value)\n\n\n"
    )


def _show_bare_expressions(code: str) -> str:
    """Wrap each top-level expression statement (other than a string, a print or a `_show`
    call) in `_show(...)`: a small model writes exploration notebook-style, and 5 of 18 measured
    scripts printed nothing because their facts were bare expressions. A retry shows the model
    its wrapped script, which it copies: wrapping again would show None."""
    tree = ast.parse(code)
    source = code.encode()
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    edits = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Expr) or stmt.end_lineno is None:
            continue
        value = stmt.value
        if isinstance(value, ast.Constant) or (
                isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id in ("print", _SHOW)):
            continue
        # AST offsets count UTF-8 bytes: splice the encoded source
        edits.append((starts[stmt.lineno - 1] + stmt.col_offset,
                      starts[stmt.end_lineno - 1] + (stmt.end_col_offset or 0)))
    for begin, end in reversed(edits):
        source = source[:begin] + f"{_SHOW}(".encode() + source[begin:end] + b")" + source[end:]
    return source.decode()


def _analysis_facts(ctx: TaskContext) -> str:
    # Each fact names the pandas expression that gets it: the small model otherwise calls
    # groupby().mean() on text columns or sort_values() on a DataFrame (measured failures).
    if ctx.task_type == "regression":
        target = ("- skew of the target and its quantiles: `df[target].skew()`, "
                  "`df[target].quantile([0, 0.25, 0.5, 0.75, 1])`;\n"
                  "- the 5 numeric columns most correlated with the target: "
                  "`numeric.corrwith(df[target]).abs().sort_values(ascending=False).head(5)`;\n")
    else:
        target = ("- the share of each class: `df[target].value_counts(normalize=True)`;\n"
                  "- the 5 numeric columns whose mean differs most between classes: "
                  "`(numeric.groupby(df[target]).mean().std() / numeric.std())"
                  ".sort_values(ascending=False).head(5)`;\n")
    return (
        target
        + "- the columns with missing values and their share of rows (only those with any);\n"
        "- text columns with more than 20 distinct values, and how many each has;\n"
        "- numeric columns with strong skew (|skew| > 2), constant columns, and columns that "
        "look like row ids (a distinct value in every row).\n"
    )


def analysis_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal) -> ChatPrompt:
    """Ask for a short exploration script; a retry shows the failed script and its error."""
    if proposal.parent_id is None:
        job = (
            "# Your job\nWrite a short Python script that explores the training data before "
            "anyone models it. Already defined for you: `df` (input/train.csv), `target` (the "
            f"name of the target column, `{ctx.target}`), `numeric` (df's numeric columns "
            "without the target), `pd` and `np`. Print, one short labelled line per fact, at "
            "most 30 lines:\n"
            + _analysis_facts(ctx)
            + "Print only the columns that meet a condition, never a whole DataFrame. Do not "
            "train models, do not plot, do not write files."
        )
    else:
        job = (_failure(journal, proposal.parent_id, "Analysis script")
               + "\n# Your job\nFix the script. `df`, `target`, `numeric`, `pd` and `np` are "
               "already defined. Return the whole corrected script.")
    return ChatPrompt(
        messages=[
            {"role": "system", "content": ANALYST_SYSTEM},
            {"role": "user", "content": f"# Task\n{ctx.preview.strip()}\n\n{job}"},
        ],
        max_tokens=ANALYSIS_TOKENS,
        temperature=proposal.temperature,
        seed=ctx.seed,
        tag=Operator.ANALYZE.value,
    )


def parse_analysis(text: str, ctx: TaskContext) -> Parsed:
    """The exploration script of a reply: the longest fenced block, run as it is after
    `analysis_head` (imports, the data loaded)."""
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    code = max(blocks, key=len) if blocks else text
    plan = _one_line(text[: text.find("```")], 400) if blocks else ""
    code = code.strip()
    if not code:
        return Parsed(plan, "", "Your reply contained no code.")
    head = analysis_head(ctx)
    for known in (head.strip(), _ANALYSIS_IMPORTS.strip()):  # a model may repeat the head
        if code.startswith(known):
            code = code[len(known):].strip()
            break
    script = head + code + "\n"
    try:
        ast.parse(script)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return Parsed(plan, script, f"Your code does not parse: SyntaxError: {exc.msg}{where}.")
    script = head + _show_bare_expressions(code) + "\n"
    return Parsed(plan or "data analysis", fix_imports(script), "")


def silent_analysis_error(stdout: str) -> str:
    """Why an analysis script that exited 0 still failed ("" when it did not): what it prints
    is its whole result."""
    return "" if stdout.strip() else "the analysis script printed nothing"


def trim_findings(stdout: str, limit: int = FINDINGS_CHARS) -> str:
    """Printed facts as prompt text: blank lines dropped, long lines cut, whole lines kept up
    to `limit` characters."""
    kept: list[str] = []
    size = 0
    for raw in stdout.splitlines():
        line = _one_line(raw.rstrip(), 200) if raw.strip() else ""
        if not line:
            continue
        if size + len(line) + 1 > limit:
            kept.append("(further output cut)")
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept)


def analysis_findings(journal: Journal) -> str:
    """The findings of the run's analysis node that ran, or "" when none did."""
    for node in journal:
        if node.operator is Operator.ANALYZE and node.status is Status.OK:
            return trim_findings(node.stdout_tail)
    return ""


def next_analysis(journal: Journal) -> Proposal | None:
    """The analysis step still owed: the first one, or one retry of a failed one showing its
    error; None once one ran or two failed. Lost or stopped attempts do not count (the loop
    and the in-flight notes re-propose those)."""
    tries = [n for n in journal if n.operator is Operator.ANALYZE
             and n.status not in (Status.LOST, Status.KILLED)]
    if len(tries) >= 2 or any(n.status is Status.OK for n in tries):
        return None
    if not tries:
        return Proposal(Operator.ANALYZE, None, temperature=0.3)
    return Proposal(Operator.ANALYZE, tries[-1].node_id, temperature=0.5)


@dataclass(frozen=True, slots=True)
class Parsed:
    plan: str
    code: str
    problem: str  # empty when the code parses; else why not, for the repair prompt


_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_FENCED = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)


def parse_reply(text: str, ctx: TaskContext) -> Parsed:
    """Split a reply into plan and runnable code; the longest fenced block is the code.

    Model code defining `fit_predict` is wrapped in the harness; a whole script that writes
    the submission itself is kept as it is.
    """
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if blocks:
        code = max(blocks, key=len)
        plan = text[: text.find("```")].strip()
    else:
        code, plan = text, ""
    code = model_part(code.strip() + "\n")
    plan = _one_line(plan, 400)
    if not code.strip():
        return Parsed(plan, "", "Your reply contained no code.")
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        problem = f"Your code does not parse: SyntaxError: {exc.msg}{where}."
        return Parsed(plan, assemble(ctx, code) if blocks else "", problem)
    code = fix_imports(code)
    defines = any(isinstance(n, ast.FunctionDef) and n.name == "fit_predict" for n in tree.body)
    if defines:
        return Parsed(plan, assemble(ctx, code), "")
    if "submission/" in code:
        return Parsed(plan, code, "")
    return Parsed(plan, "", "Your code does not define fit_predict(X, y, X_valid, X_test).")


@dataclass(frozen=True, slots=True)
class ParsedInsights:
    insights: tuple[str, ...]
    problem: str  # empty when at least one idea was found


_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(.+?)\s*$", re.MULTILINE)
_TEXT_KEYS = ("insight", "idea", "analysis", "text", "description")


def parse_insights(text: str) -> ParsedInsights:
    """The ideas of an insights reply: a JSON list (in a fence or bare; of strings, or of
    objects holding one), a JSON object holding such a list, or else bulleted lines.
    Whitespace is flattened, repeats dropped, at most MAX_INSIGHTS kept in reply order."""
    found: list[str] = []
    for candidate in _json_candidates(text):
        try:
            data = json.loads(candidate, strict=False)
        except ValueError:
            continue
        found = _insight_items(data)
        if found:
            break
    if not found:
        found = _BULLET.findall(text)
    kept: list[str] = []
    seen: set[str] = set()
    for item in found:
        idea = _one_line(str(item).strip().strip("\"'"), _INSIGHT_CHARS)
        if idea and idea.lower() not in seen:
            seen.add(idea.lower())
            kept.append(idea)
    if not kept:
        return ParsedInsights((), "Your reply contained no list of ideas.")
    return ParsedInsights(tuple(kept[:MAX_INSIGHTS]), "")


def encode_insights(insights: tuple[str, ...]) -> str:
    """How an insights node keeps its ideas: its `plan` is this JSON list."""
    return json.dumps(list(insights), ensure_ascii=False)


def decode_insights(plan: str) -> tuple[str, ...]:
    """The ideas an insights node holds; none when its plan is not a JSON list of strings."""
    try:
        data = json.loads(plan, strict=False)
    except ValueError:
        return ()
    if not isinstance(data, list):
        return ()
    return tuple(str(item) for item in data if isinstance(item, str) and item.strip())


def _json_candidates(text: str) -> list[str]:
    fenced = re.findall(r"```[a-zA-Z]*[ \t]*\n(.*?)```", text, re.DOTALL)
    spans = [text[a:b + 1] for a, b in ((text.find("["), text.rfind("]")),
                                        (text.find("{"), text.rfind("}"))) if 0 <= a < b]
    return [*fenced, *spans, text]


def _insight_items(data: object) -> list[str]:
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        return _insight_items(lists[0]) if lists else []
    if not isinstance(data, list):
        return []
    items = []
    for item in data:
        if isinstance(item, str):
            items.append(item)
        elif isinstance(item, dict):
            texts = [item[k] for k in _TEXT_KEYS if isinstance(item.get(k), str)]
            texts = texts or [v for v in item.values() if isinstance(v, str)]
            if texts:
                items.append(texts[0])
    return items


def api_hints(error_text: str) -> list[str]:
    """The hints whose marker is in the error, each once, in API_HINTS order."""
    return list(dict.fromkeys(hint for marker, hint in API_HINTS if marker in error_text))


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
