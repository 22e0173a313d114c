"""Retrieved cases (seed 004, --memory): other tasks' working model code.

A `case` node runs a case as stored, with no LLM call (the floor proposes it); a `recall`
root is the LLM's adaptation of one, a draft of its own. A case in the engine's own earlier
form (imports, a literal PARAMS, and a `fit_predict` that prepares the rows, fits one
estimator built from those and predicts: most stored cases are tune nodes) runs as the
make_model() code that form now has: the same model on the same features, run like engine
code (every fold in one process) and kept fitted for the answer's saved model.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import replace

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.failures import code_block
from operators.harness import assemble, model_functions, predict_call
from operators.kinds._base import EngineCode, FloorKind, OperatorKind, register
from operators.params import Params, read_params, with_params
from operators.prompts import chat_prompt
from operators.retrieval import AS_STORED, Case, shortened
from search.families import FAMILIES
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


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
    return chat_prompt(ctx, tail, proposal, ctx.max_tokens)


@register
class Recall(OperatorKind):
    operator = Operator.RECALL

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        return recall_prompt(ctx, proposal)


def engine_form(ctx: TaskContext, code: str) -> str | None:
    """A case's model code as make_model() code when it is engine-written model code: module
    level only imports, a literal PARAMS, and either the earlier form's `fit_predict` (exactly
    `X, X_valid, X_test = prepare(X, X_valid, X_test)`, `model = <estimator>`,
    `model.fit(X, y)`, the return of this task's predict call) or `make_model()` returning
    `Encoded(<estimator>)` with the `fit_predict` the engine writes for it; the estimator built
    from imported names and PARAMS alone. None for any other code."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    imported, head, functions = {"PARAMS"}, [], {}
    for statement in tree.body:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            imported |= {(a.asname or a.name).split(".")[0] for a in statement.names}
        elif (isinstance(statement, ast.Assign) and len(statement.targets) == 1
              and isinstance(statement.targets[0], ast.Name)
              and statement.targets[0].id == "PARAMS" and _literal(statement.value)):
            pass
        elif isinstance(statement, ast.FunctionDef) and statement.name not in functions:
            functions[statement.name] = [ast.unparse(s) for s in statement.body]
            continue
        else:
            return None
        head.append(ast.get_source_segment(code, statement) or "")
    predict = ast.unparse(ast.parse(f"({predict_call(ctx)})"))
    if set(functions) == {"fit_predict"}:
        steps = functions["fit_predict"]
        estimator = steps[1].removeprefix("model = ") if len(steps) == 4 else ""
        if steps != [_canonical("X, X_valid, X_test = prepare(X, X_valid, X_test)"),
                     f"model = {estimator}", _canonical("model.fit(X, y)"),
                     f"return {predict}"]:
            return None
    elif set(functions) == {"make_model", "fit_predict"}:
        made = functions["make_model"]
        if (len(made) != 1 or not made[0].startswith("return Encoded(")
                or functions["fit_predict"] != [_canonical("model = make_model().fit(X, y)"),
                                                f"return {predict}"]):
            return None
        estimator = made[0].removeprefix("return Encoded(")[:-1]
    else:
        return None
    try:
        call = ast.parse(estimator, mode="eval").body
    except SyntaxError:  # Encoded(...) with more than one argument
        return None
    if not isinstance(call, ast.Call) or any(
            isinstance(n, ast.Lambda | ast.NamedExpr)
            or (isinstance(n, ast.Name) and n.id not in imported) for n in ast.walk(call)):
        return None
    return "\n".join(head) + "\n\n\n" + model_functions(ctx, f"Encoded({estimator})")


def case_configuration(ctx: TaskContext, code: str) -> tuple[str, Params] | None:
    """The (family, PARAMS) of a case in the engine's form (`engine_form`) whose estimator is
    that family's, with a value for every dimension of its space; None for any other code. A
    classifier's case predicting probabilities counts on a label metric too, where the harness
    takes each row's most probable class (every shipped classification case)."""
    params = read_params(code)
    if params is None:
        return None
    forms = (ctx,) if ctx.task_type == "regression" else (ctx, replace(ctx, needs_proba=True))
    for form in forms:
        model = engine_form(form, code)
        if model is None:
            continue
        for name, family in FAMILIES.items():
            estimator = _canonical(family.model(ctx.task_type == "regression"))
            if (model.endswith(model_functions(form, f"Encoded({estimator})"))
                    and all(dimension[0] in params for dimension in family.space)):
                return name, params
    return None


def case_configurations(ctx: TaskContext, cases: Sequence[Case]) -> dict[str, tuple[str, Params]]:
    """`case_configuration` of each of `cases` that is one, by case id."""
    return {case.case_id: found for case in cases
            if (found := case_configuration(ctx, case.code)) is not None}


def _canonical(line: str) -> str:
    return ast.unparse(ast.parse(line))


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


@register
class StoredCase(FloorKind):
    operator = Operator.CASE

    def engine_code(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> EngineCode:
        # Another task's code, written by an LLM there: it runs fold by fold like the LLM's
        # code here, not in one engine-trusted run of all folds, unless it is the engine's own
        # earlier form (engine_form).
        case = recalled_case(ctx, proposal)
        plan = f"{AS_STORED}: {case.operator} code of {case.dataset}"
        code = case.code
        if proposal.params:  # sized to this run by the floor (case_configuration)
            code = with_params(code, proposal.param_dict)
            plan += ", sized to this run: " + ", ".join(f"{k}={v}" for k, v in proposal.params)
        model = engine_form(ctx, code)
        if model is None:
            return EngineCode(plan, assemble(ctx, code))
        return EngineCode(plan, assemble(ctx, model), assemble(ctx, model, all_folds=True))
