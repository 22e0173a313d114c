"""A model's hyperparameters as one `PARAMS` dict: read it from code, write new values into it.

The prompts ask the model to keep its hyperparameters in a top-level `PARAMS = {...}` of plain
numbers and strings (the engine's own model code does the same), so the engine can tune an
LLM-written node with Optuna: each trial is the node's code with only that dict changed.
"""

from __future__ import annotations

import ast
import json
from typing import Any

Params = dict[str, Any]


def _params_node(tree: ast.Module) -> ast.Assign | None:
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == "PARAMS"
                and isinstance(stmt.value, ast.Dict)):
            return stmt
    return None


def read_params(code: str) -> Params | None:
    """The literal `PARAMS` dict of `code` (string keys; numbers, strings, booleans or None as
    values); None when there is none or it is not literal."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    stmt = _params_node(tree)
    if stmt is None:
        return None
    try:
        value = ast.literal_eval(stmt.value)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    if not all(v is None or isinstance(v, bool | int | float | str) for v in value.values()):
        return None
    return value


def with_params(code: str, params: Params) -> str:
    """`code` with its `PARAMS` dict replaced by `params` (keys of `params` override, the
    others stay); unchanged when it has no literal PARAMS."""
    current = read_params(code)
    if current is None:
        return code
    stmt = _params_node(ast.parse(code))
    assert stmt is not None and stmt.end_lineno is not None  # read_params found it
    lines = code.splitlines(keepends=True)
    new = f"PARAMS = {({**current, **params})!r}\n"
    return "".join(lines[: stmt.lineno - 1]) + new + "".join(lines[stmt.end_lineno:])


def params_json(code: str) -> str:
    """The literal PARAMS dict of model code as JSON ("" when it has none)."""
    params = read_params(code)
    return json.dumps(params, sort_keys=True) if params is not None else ""
