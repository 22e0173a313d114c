"""Implementation verification: flags for results that deserve a second look.

AutoML-Agent (seed 004) verifies a request, an execution and an implementation. Here execution
verification is the scorer (a malformed submission makes a node buggy); this module holds the
implementation checks, pure functions of a node's code and scores:

- `perfect_valid_score`: the valid score is the metric's perfect value. Some data allows it
  (banknote authentication reaches AUC 1.0), so it is a warning, not a verdict.
- `valid_beats_train`: the valid score is clearly better than the in-sample train score of the
  same model. A model normally does at least as well on rows it was fitted on, so this hints at
  information about valid rows reaching the model (leakage) or a broken train evaluation.
- `reads_outside_input`: the code reads a file or lists a folder outside `input/` (and
  `submission/`), statically resolved from string literals. The sandbox hides the labels, so
  such a read cannot inflate a score; it makes the solution depend on files a deployment lacks.

A flag never changes eligibility: the valid labels are hidden from every candidate, so a
flagged score is still an honest measurement on unseen labels; summary.md lists flagged nodes.
"""

from __future__ import annotations

import ast
import posixpath

from common.metric import MetricSpec

# log_loss is clipped at 1e-15 per row, so a perfect model scores a little above zero.
_PERFECT_TOLERANCE = {"log_loss": 1e-6}
# valid_beats_train thresholds: a score in [0, 1] (and r2) must beat train by this much; an error
# (rmse, mae, log_loss) must be below this share of the train error. Loose on purpose: with a
# small valid split a score moves by several points by chance alone.
SCORE_MARGIN = 0.1
ERROR_RATIO = 0.7

PERFECT_VALID = "perfect_valid_score"
VALID_BEATS_TRAIN = "valid_beats_train"
READS_OUTSIDE_INPUT = "reads_outside_input"

_FILE_READERS = frozenset({
    "open", "read_csv", "read_table", "read_parquet", "read_excel", "read_json", "read_pickle",
    "read_feather", "read_hdf", "load", "loadtxt", "genfromtxt", "fromfile",
    "load_svmlight_file",
})
_LISTERS = frozenset({"listdir", "scandir", "walk", "glob", "iglob"})
_PATH_METHODS = frozenset({"read_text", "read_bytes", "open", "iterdir", "glob", "rglob"})
_ALLOWED_DIRS = ("input", "submission")


def perfect_score(spec: MetricSpec, valid_raw: float | None) -> bool:
    if valid_raw is None:
        return False
    return abs(valid_raw - spec.perfect) <= _PERFECT_TOLERANCE.get(spec.name, 1e-9)


def valid_beats_train(spec: MetricSpec, valid_raw: float | None,
                      train_raw: float | None) -> bool:
    if valid_raw is None or train_raw is None:
        return False
    if spec.maximize:
        return valid_raw - train_raw > SCORE_MARGIN
    return train_raw > 0 and valid_raw < ERROR_RATIO * train_raw


def outside_reads(code: str) -> list[str]:
    """Paths the code reads or lists outside input/ and submission/, as written in the code.

    Only paths built from string literals (directly, through a variable assigned once, an
    f-string without fields, `os.path.join` or `Path(...) / ...`) are resolved; a path computed
    at run time is not judged. Code that does not parse reads nothing.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names = _literal_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        path = _read_path(node, names)
        if path is not None and _outside(path) and path not in found:
            found.append(path)
    return found


def implementation_flags(spec: MetricSpec, code: str, valid_raw: float | None,
                         train_raw: float | None) -> list[str]:
    """Every flag of one node, in a fixed order."""
    flags = []
    if perfect_score(spec, valid_raw):
        flags.append(PERFECT_VALID)
    if valid_beats_train(spec, valid_raw, train_raw):
        flags.append(VALID_BEATS_TRAIN)
    if code and outside_reads(code):
        flags.append(READS_OUTSIDE_INPUT)
    return flags


def _literal_names(tree: ast.AST) -> dict[str, str]:
    """Variables assigned exactly one string-literal path anywhere in the code."""
    seen: dict[str, str | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                value = _literal(node.value, {})
                previous = seen.get(target.id, value)
                seen[target.id] = value if previous == value else None
    return {k: v for k, v in seen.items() if v is not None}


def _literal(node: ast.AST, names: dict[str, str]) -> str | None:
    """The string a path expression evaluates to, when it is built from literals only."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.JoinedStr):
        parts = [_literal(v, names) for v in node.values]
        return None if any(p is None for p in parts) else "".join(p or "" for p in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # Path("a") / "b"
        left, right = _literal(node.left, names), _literal(node.right, names)
        return None if left is None or right is None else posixpath.join(left, right)
    if isinstance(node, ast.Call):
        func = _func_name(node)
        if func == "join" and node.args:  # os.path.join
            parts = [_literal(a, names) for a in node.args]
            known = [p for p in parts if p is not None]
            return posixpath.join(*known) if len(known) == len(parts) else None
        if func in ("Path", "PurePath", "PosixPath") and len(node.args) == 1:
            return _literal(node.args[0], names)
    return None


def _func_name(call: ast.Call) -> str:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return ""


def _read_path(call: ast.Call, names: dict[str, str]) -> str | None:
    """The literal path a call reads or lists, or None (not a read, or not a literal)."""
    func = _func_name(call)
    if func in _PATH_METHODS and isinstance(call.func, ast.Attribute):
        owner = _literal(call.func.value, names)
        if owner is not None and isinstance(call.func.value, ast.Call | ast.BinOp | ast.Name):
            if func == "open" and _writes(call, mode_index=0):
                return None
            return owner
    if func in _LISTERS:
        if not call.args:
            return "." if func in ("listdir", "scandir") else None
        return _literal(call.args[0], names)
    if func in _FILE_READERS and call.args:
        if func == "open" and _writes(call, mode_index=1):
            return None
        return _literal(call.args[0], names)
    return None


def _writes(call: ast.Call, mode_index: int) -> bool:
    mode = call.args[mode_index] if len(call.args) > mode_index else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return (isinstance(mode, ast.Constant) and isinstance(mode.value, str)
            and any(c in mode.value for c in "wax"))


def _outside(path: str) -> bool:
    if not path.strip():
        return False
    if path.startswith(("/", "~")):
        return True
    normal = posixpath.normpath(path)
    if normal == "." or normal.startswith(".."):
        # The workdir itself holds only input/ and submission/; a parent is the host.
        return normal != "."
    head = normal.split("/", 1)[0]
    return head not in _ALLOWED_DIRS
