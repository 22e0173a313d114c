"""The data analyst (seed 003): an exploration script before any draft, and its findings.

The engine prepends a fixed head that loads `df`, `target` and `numeric`, and wraps top-level
bare expressions in a print, as a notebook shows a cell's value; what the script prints is the
run's findings, which join every later prompt's stable prefix.
"""

from __future__ import annotations

import ast

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.failures import failure_section
from operators.imports import fix_imports
from operators.replies import FENCE, Parsed, one_line
from search.journal import Journal
from search.node import Operator, Status
from search.policy import Proposal

ANALYST_SYSTEM = (
    "You are a careful data analyst. You write short, correct pandas scripts that print "
    "facts about a dataset. Reply with one ```python code block."
)
_ANALYSIS_IMPORTS = "import numpy as np\nimport pandas as pd\n"
# The analysis is a preamble every draft waits for, not a candidate: a slow one costs the
# whole search, so it gets less time than a candidate.
ANALYSIS_SECONDS = 120.0
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
        job = (failure_section(journal, proposal.parent_id, "Analysis script")
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
    blocks = [b for b in FENCE.findall(text) if b.strip()]
    code = max(blocks, key=len) if blocks else text
    plan = one_line(text[: text.find("```")], 400) if blocks else ""
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
        line = one_line(raw.rstrip(), 200) if raw.strip() else ""
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
    for node in journal.nodes_of(Operator.ANALYZE):
        if node.status is Status.OK:
            return trim_findings(node.stdout_tail)
    return ""


def next_analysis(journal: Journal) -> Proposal | None:
    """The analysis step still owed: the first one, or one retry of a failed one showing its
    error; None once one ran or two failed. Lost or stopped attempts do not count (the loop
    and the in-flight notes re-propose those)."""
    tries = [n for n in journal.nodes_of(Operator.ANALYZE)
             if n.status not in (Status.LOST, Status.KILLED)]
    if len(tries) >= 2 or any(n.status is Status.OK for n in tries):
        return None
    if not tries:
        return Proposal(Operator.ANALYZE, None, temperature=0.3)
    return Proposal(Operator.ANALYZE, tries[-1].node_id, temperature=0.5)

