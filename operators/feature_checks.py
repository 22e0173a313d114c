"""The checks on a feature program's text, before it costs a run (operators.features holds
the rest of a program's life: its repairs, and the script that runs it).

A program parses; it imports only numpy, pandas, math, re and datetime; it names no file,
module or interpreter internals (`open`, `read_csv`, `os`, `__class__`, ...), so that it
cannot read the training labels, the test rows or a label file even inside a process that
holds them; it names only columns the rows have or it creates; it never names the target.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

FUNCTION = "add_features"
ALLOWED_IMPORTS = frozenset({"numpy", "pandas", "math", "re", "datetime"})
_FORBIDDEN_NAMES = frozenset({
    "open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr",
    "setattr", "delattr", "input", "breakpoint", "exit", "quit", "memoryview", "help", "os",
    "sys", "subprocess", "pathlib", "Path", "io", "glob", "shutil", "pickle", "importlib",
})
# pandas / numpy calls that read or write files (to_numeric, to_datetime, to_timedelta: fine)
_FILE_ATTRIBUTES = re.compile(
    r"^(read_\w+|to_(csv|pickle|parquet|json|excel|sql|hdf|feather|stata|html|latex|xml|"
    r"markdown|clipboard|orc)|load\w*|save\w*|open\w*|genfromtxt|fromfile|fromregex|"
    r"tofile|memmap|HDFStore|ExcelFile|ExcelWriter|DataSource|io|lib|ctypeslib|f2py|"
    r"distutils|testing|system|popen)$")


def check_program(source: str, columns: Sequence[str], target: str) -> str:
    """Why the program text is refused, in one line ("" when it passes)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"it does not parse: {exc.msg} (line {exc.lineno})"
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not any(f.name == FUNCTION for f in functions):
        return f"it defines no {FUNCTION}(df) function"
    for statement in tree.body:
        if not isinstance(statement, ast.Import | ast.ImportFrom | ast.FunctionDef) and not (
                isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
            return ("only imports and functions may sit at the top level "
                    f"(line {statement.lineno})")
    assigned = assigned_columns(tree)
    known = set(columns) | assigned
    for node in ast.walk(tree):
        problem = _refused(node, target)
        if problem:
            return problem
        for name in read_columns(node):
            if name == target:
                return f"it reads the target column {target!r}, which a program never gets"
            if name not in known:
                return f"it names a column {name!r} that the rows do not have"
    if target in assigned:
        return f"it writes the target column {target!r}"
    return ""


def _refused(node: ast.AST, target: str) -> str:
    if isinstance(node, ast.Import | ast.ImportFrom):
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                   else [node.module or ""])
        for module in modules:
            if module.split(".")[0] not in ALLOWED_IMPORTS:
                return (f"it imports {module!r}; a program may import only "
                        f"{', '.join(sorted(ALLOWED_IMPORTS))}")
    if isinstance(node, ast.Name) and (node.id in _FORBIDDEN_NAMES or node.id.startswith("__")):
        return f"it uses {node.id!r}: a program computes from the rows it is given, nothing else"
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            return f"it uses the private attribute {node.attr!r}"
        if _FILE_ATTRIBUTES.match(node.attr):
            return f"it uses {node.attr!r}, which reaches files or code beyond the rows"
    if isinstance(node, ast.Constant) and node.value == target and isinstance(node.value, str):
        return f"it names the target column {target!r}, which a program never gets"
    return ""


def subscript_names(node: ast.Subscript) -> list[str]:
    index = node.slice
    items = index.elts if isinstance(index, ast.List | ast.Tuple) else [index]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def assigned_columns(tree: ast.AST) -> set[str]:
    """Columns the program creates: `df['new'] = ...`, `df.assign(new=...)`,
    `df.rename(columns={...: 'new'})` (their names may be read afterwards)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            out.update(subscript_names(node))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            out.update(k.arg for k in node.keywords if node.func.attr == "assign" and k.arg)
            for keyword in node.keywords:
                if keyword.arg == "columns" and isinstance(keyword.value, ast.Dict):
                    out.update(v.value for v in keyword.value.values
                               if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return out


def columns_read(source: str) -> set[str]:
    """The columns a program reads (`df["a"]`, `df[["a", "b"]]`); none when it does not
    parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {name for node in ast.walk(tree) for name in read_columns(node)}


def read_columns(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        value = node.value
        # df["a"], df[["a", "b"]], df.loc[:, "a"] read columns; a string index of anything
        # else (a dict, a regex match) is not a column
        if isinstance(value, ast.Name):
            return subscript_names(node)
    return []
