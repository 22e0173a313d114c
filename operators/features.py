"""Feature programs as text: the repairs a reply gets before it is checked, and the code that
applies a chain of kept programs to every frame before the engine's model sees it.

A program is one function, `add_features(df) -> df`, written by the LLM: it gets the feature
columns of some rows (never the target) and returns them with a few columns added or retyped,
each from the row's own values. Two kinds of check stand between it and a kept feature set:

- on its text, before it costs a run (`operators.feature_checks`): it imports, calls and
  names only what computes from the rows it is given, and never the target.
- in the sandbox, on the rows, before any model is fitted (`check_program` in the script): it
  returns a DataFrame with every row in order, adds, changes or drops a column, floods no
  column with missing values, and computes each row from that row alone (the rows in two halves
  give the same columns), so that a deployed model computes a row the same way alone.

The sandbox stays the boundary: the text checks keep a kept program honest inside the engine's
own all-folds runs, where every dev label is in the process.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from collections.abc import Callable, Sequence

from operators.feature_checks import FUNCTION, assigned_columns, read_columns, subscript_names
from operators.feature_checks import check_program as check_program  # re-exported
from operators.feature_checks import columns_read as columns_read  # re-exported
from search.programs import REJECTED

MAX_COLUMNS = 10  # a program adds a few columns; more is a sign of a loop over every column
# Share of rows a new column may leave missing (NaN, or inf turned NaN): a ratio whose
# divisor is 0 on half the rows (concrete's ash) still tells the model about the other half.
MAX_MISSING = 0.9
MIN_SHORTENED = 4  # letters and digits a shortened column name keeps at least
# The sandboxed script prints this line with the columns the program added or changed.
REPORT = "__treeml_features__"
# ... and this one with the fitted model's largest importances (shares of their sum).
IMPORTANCES = "__treeml_importances__"
IMPORTANCES_SHOWN = 8


def program_source(text: str) -> str:
    """The program in a reply: its ```python block (the last holding add_features), else the
    whole reply."""
    # a reply cut at its closing fence (the prompt's stop string) has none
    blocks = re.findall(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", text, flags=re.S)
    with_function = [b for b in blocks if f"def {FUNCTION}" in b]
    if with_function:
        return with_function[-1].strip() + "\n"
    if blocks:
        return blocks[-1].strip() + "\n"
    return text.strip() + "\n"


def completed(source: str) -> str:
    """A program with what a small model leaves out put back: cut at the token cap, its last
    whole statements (a reply that adds six columns is cut in the fifth; the first four are a
    program); without any return, `return df` at the end (it changed df in place and forgot
    it). Unchanged when it parses and returns."""
    lines = source.rstrip().splitlines()
    for end in range(len(lines), 0, -1):
        text = "\n".join(lines[:end]) + "\n"
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        function = next((n for n in tree.body if isinstance(n, ast.FunctionDef)
                         and n.name == FUNCTION), None)
        if function is None:
            return source
        whole = end == len(lines)
        if whole and any(isinstance(n, ast.Return) and n.value is not None
                         for n in ast.walk(function)):
            return source
        last = function.body[-1]
        if isinstance(last, ast.Return):
            if last.value is not None:
                return text
            # a bare `return`: the reply was cut inside `return df` (it returned None)
            text = "".join(text.splitlines(keepends=True)[:last.lineno - 1])
        argument = function.args.args[0].arg if function.args.args else "df"
        return text + f"    return {argument}\n"
    return source


def body_statements(source: str) -> str:
    """The statements of a program's add_features before its return, each line indented by
    four spaces as in a function body (as Python writes them: one source, however the model
    spaced it): what a later program's reply is started with, so that the model sees the kept
    columns made and goes on with a new one. "" when the source does not parse or defines no
    add_features."""
    function = _add_features(source)
    if function is None:
        return ""
    kept = [s for s in function.body if not isinstance(s, ast.Return)]
    return "".join(textwrap.indent(ast.unparse(s), "    ") + "\n" for s in kept)


def computations(source: str) -> dict[str, str]:
    """What each `df[name] = value` statement of add_features computes: its column's name and
    its value as Python writes it (one spelling, however the model spaced, quoted or
    parenthesised it), in order. {} when the source does not parse or defines no
    add_features."""
    function = _add_features(source)
    out: dict[str, str] = {}
    for statement in function.body if function is not None else []:
        if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Subscript)):
            names = subscript_names(statement.targets[0])
            if len(names) == 1:
                out[names[0]] = ast.unparse(statement.value)
    return out


def in_words(value: str) -> str:
    """A computation as a line of a prompt reads it: its columns by their names alone
    (`df['area'] / df['rooms']` as `area / rooms`)."""
    return re.sub(r"\b\w+\[(['\"])(.*?)\1\]", r"\2", value)


def without_columns(source: str, columns: Sequence[str]) -> str:
    """The program without its statements that write one of `columns` (the columns its chain
    of kept programs adds, which stay as those programs made them): what is left is what the
    program adds. A small model repeats the kept columns in most of its later programs. The
    source as it is when it does not parse or writes none of them."""
    def writes_them(statement: ast.stmt) -> bool:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        names = subscript_names(targets[0]) if len(targets) == 1 and isinstance(
            targets[0], ast.Subscript) else []
        return bool(names) and set(names) <= set(columns)

    return _without_statements(source, writes_them) if columns else source


def without_text_arithmetic(source: str, text_columns: Sequence[str]) -> tuple[str, list[str]]:
    """The program without its statements that do arithmetic on text: a text column as it is
    (`df["status"] / 2`, `df["status"].astype(float)`) or a string (`"business" * 1.0`), which
    raise on the rows; and the text columns they named. A small model wrote such statements in
    5 of 12 programs of a run on credit-g, each beside statements that would have run."""
    text = set(text_columns)
    named: list[str] = []

    def textual(node: ast.AST) -> str | None:
        """The text column (or "" for a string) an operand is, None when it is neither."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "astype":
            node = node.func.value
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            names = [n for n in subscript_names(node) if n in text]
            return names[0] if names else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # joined labels
            return "" if textual(node.left) is not None and textual(node.right) is not None \
                else None
        return "" if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    def computes_on_text(statement: ast.stmt) -> bool:
        found = False
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "astype" and textual(node) and any(
                        isinstance(a, ast.Name) and a.id in ("float", "int") for a in node.args):
                named.append(textual(node) or "")
                found = True
            if not isinstance(node, ast.BinOp):
                continue
            left, right = textual(node.left), textual(node.right)
            # text + text joins two labels into one: a category, not arithmetic
            if (left is None and right is None) or (
                    isinstance(node.op, ast.Add) and left is not None and right is not None):
                continue
            named.extend(c for c in (left, right) if c)
            found = True
        return found

    trimmed = _without_statements(source, computes_on_text)
    return trimmed, list(dict.fromkeys(named))


def does_something(source: str) -> bool:
    """Whether add_features does anything but hand its frame back (a docstring, `pass` and
    `return df` do nothing); True for a source that does not parse or has no such function,
    which the checks refuse."""
    function = _add_features(source)
    if function is None:
        return True

    def idle(statement: ast.stmt) -> bool:
        if isinstance(statement, ast.Return):  # `return df` does nothing, `return df.drop(...)`
            return statement.value is None or isinstance(statement.value, ast.Name)
        return isinstance(statement, ast.Pass) or (
            isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))

    return not all(idle(s) for s in function.body)


def _without_statements(source: str, drop: Callable[[ast.stmt], bool]) -> str:
    """The program without the statements of add_features' body that `drop` picks, the
    other lines as written; as it is when it does not parse."""
    function = _add_features(source)
    if function is None:
        return source
    lines_out: set[int] = set()
    for statement in function.body:
        if drop(statement):
            lines_out.update(range(statement.lineno, (statement.end_lineno or
                                                      statement.lineno) + 1))
    if not lines_out:
        return source
    lines = source.splitlines(keepends=True)
    return "".join(line for number, line in enumerate(lines, 1) if number not in lines_out)


def _add_features(source: str) -> ast.FunctionDef | None:
    """The program's add_features, None when it does not parse or defines none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef)
                 and n.name == FUNCTION), None)


def _spelling(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", name.lower())


def _column_named(name: str, by_spelling: dict[str, str]) -> str | None:
    """The column `name` means: the one spelled the same but for case, spaces or punctuation,
    else the only one whose spelling it begins (`volatile_acid` for `volatile acidity`)."""
    spelled = _spelling(name)
    if spelled in by_spelling:
        return by_spelling[spelled]
    longer = [column for spelling, column in by_spelling.items()
              if len(spelled) >= MIN_SHORTENED and spelling.startswith(spelled)]
    return longer[0] if len(longer) == 1 else None


def with_column_names(source: str, columns: Sequence[str]) -> str:
    """The program with each column it reads spelled as the rows spell it, where the two
    differ only in case, spaces or punctuation (a small model writes `fixed_acidity` for
    `fixed acidity`), or where the program's name is the start of one column's name alone
    (`volatile_acid` for `volatile acidity`). Other names are left for the checks."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    known = set(columns) | assigned_columns(tree)
    by_spelling = {_spelling(c): c for c in columns}
    meant = {name: _column_named(name, by_spelling)
             for node in ast.walk(tree) for name in read_columns(node) if name not in known}
    for name in sorted(meant, key=len, reverse=True):
        right = meant[name]
        if right is not None:
            source = source.replace(repr(name), repr(right)).replace(f'"{name}"', repr(right))
    return source


# Applies the chain; a member of an ensemble runs this in its own namespace, with np and pd.
_APPLY = '''

def with_features(frame):
    """The frame with the kept feature programs applied in order (each written by the LLM
    and kept by the engine only when it made this model better on the same held-out rows)."""
    return apply_programs(frame, FEATURE_PROGRAMS)
'''

# Run once on the training rows before any model is fitted: the newest program's checks.
_CHECK = '''

class FeatureProgramRejected(Exception):
    pass


def check_program(frame, target):
    """Refuse the newest program before any model is fitted (operators/features.py)."""
    import json

    def refuse(why):
        raise FeatureProgramRejected(__REJECTED__ + " " + why)

    base = apply_programs(frame, FEATURE_PROGRAMS[:-1])
    try:
        out = apply_programs(base, FEATURE_PROGRAMS[-1:])
    except KeyError as exc:
        if target in str(exc):
            refuse(f"it reads the target column {target!r}")
        refuse(f"it names a column the rows do not have: {exc}")
    except Exception as exc:
        refuse(f"it raised {type(exc).__name__}: {str(exc)[:200]}")
    if not isinstance(out, pd.DataFrame):
        refuse(f"add_features returned {type(out).__name__}, not the DataFrame")
    if len(out) != len(base) or not out.index.equals(base.index):
        refuse(f"it returned {len(out)} rows for {len(base)}: keep every row, in order")
    if target in out.columns:
        refuse(f"it adds the target column {target!r}")
    changed = [c for c in out.columns
               if c not in base.columns or not out[c].equals(base[c])]
    dropped = [c for c in base.columns if c not in out.columns]
    if not changed and not dropped:
        refuse("it adds, changes or drops no column")
    if len(changed) > __MAX_COLUMNS__:
        refuse(f"it adds or changes {len(changed)} columns; at most __MAX_COLUMNS__")
    for col in changed:
        before = base[col].isna().mean() if col in base.columns else 0.0
        missing = out[col].isna().mean() - before
        if missing > __MAX_MISSING__:
            refuse(f"column {col!r} is missing (NaN or inf) on {missing:.0%} of the rows")
    half = len(base) // 2
    if half:
        parts = pd.concat([apply_programs(base.iloc[:half], FEATURE_PROGRAMS[-1:]),
                           apply_programs(base.iloc[half:], FEATURE_PROGRAMS[-1:])])
        for col in changed:
            a, b = out[col], parts[col] if col in parts.columns else None
            same = b is not None and (a.equals(b) or (
                a.dtype.kind in "fiu" and b.dtype.kind in "fiu"
                and np.allclose(a.to_numpy(float), b.to_numpy(float), equal_nan=True)))
            if not same:
                refuse(f"column {col!r} of a row depends on the other rows (a mean, a rank, a "
                       "shift over the frame): compute each row from its own values")
    # dropped columns are listed as "-name"
    report = [str(c) for c in changed] + [f"-{c}" for c in dropped]
    print(__REPORT__ + " " + json.dumps({"added": report}))


if _treeml_main:  # not in a saved model's module (operators/harness.py)
    check_program(X, TARGET)


def report_importances(model, columns):
    """The columns the fitted model relies on most, once per process: what the next
    program's prompt shows (operators/kinds/features.py)."""
    import json

    global _IMPORTANCES_REPORTED
    if globals().get("_IMPORTANCES_REPORTED"):
        return
    _IMPORTANCES_REPORTED = True
    fitted = model.steps[-1][1] if hasattr(model, "steps") else model
    values = getattr(fitted, "feature_importances_", None)
    if values is None and getattr(fitted, "coef_", None) is not None:
        values = np.abs(np.asarray(fitted.coef_, dtype=float)).reshape(-1, len(columns)).sum(0)
    if values is None or len(values) != len(columns):
        return
    values = np.asarray(values, dtype=float)
    total = float(values.sum()) or 1.0
    top = sorted(zip(columns, values / total), key=lambda pair: -pair[1])[:__SHOWN__]
    print(__IMPORTANCES__ + " " + json.dumps({str(c): round(float(v), 3) for c, v in top}))
'''


def programs_block(programs: Sequence[str], *, check: bool = False) -> str:
    """Model-part code defining FEATURE_PROGRAMS and `with_features(frame)`; with `check`, it
    also checks the newest program on the training rows (`X`) before anything else runs,
    raising an error whose message begins with search.programs.REJECTED."""
    listing = "[\n" + "".join(f"    {p!r},\n" for p in programs) + "]"
    code = f"FEATURE_PROGRAMS = {listing}\n" + _APPLY
    if check:
        code += (_CHECK.replace("__REJECTED__", repr(REJECTED))
                 .replace("__MAX_COLUMNS__", str(MAX_COLUMNS))
                 .replace("__MAX_MISSING__", repr(MAX_MISSING))
                 .replace("__REPORT__", repr(REPORT))
                 .replace("__IMPORTANCES__", repr(IMPORTANCES))
                 .replace("__SHOWN__", str(IMPORTANCES_SHOWN)))
    return code


def feature_programs(code: str) -> list[str]:
    """The chain of programs a node's code applies (its FEATURE_PROGRAMS), [] for none."""
    if "FEATURE_PROGRAMS = " not in code:
        return []
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    for statement in tree.body:
        if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
                and statement.targets[0].id == "FEATURE_PROGRAMS"):
            try:
                value = ast.literal_eval(statement.value)
            except ValueError:
                return []
            return [str(p) for p in value] if isinstance(value, list) else []
    return []


def reported_importances(stdout: str) -> dict[str, float]:
    """The importances a features run reported (column -> share), {} when none."""
    for line in stdout.splitlines():
        if line.startswith(IMPORTANCES + " "):
            try:
                data = json.loads(line[len(IMPORTANCES) + 1:])
                return {str(c): float(v) for c, v in data.items()}
            except (ValueError, AttributeError, TypeError):
                return {}
    return {}


def added_columns(stdout: str) -> tuple[str, ...]:
    """The columns the sandboxed check reported the program added or changed."""
    for line in stdout.splitlines():
        if line.startswith(REPORT + " "):
            try:
                return tuple(str(c) for c in json.loads(line[len(REPORT) + 1:])["added"])
            except (ValueError, KeyError, TypeError):
                return ()
    return ()
