"""The house's gauges (issue 76), read from the files alone: no product module over 500 lines,
no code in the benchmarks' results, few operator branches outside the operators' own modules,
and the import contracts of pyproject.toml (`lint-imports`, which CI's lint step also runs).

Each check names what is over and where (file:line), so a failure says what to move. The
tests parse source text and import nothing of the project: well under 2 s together.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("engine", "actors", "operators", "search", "sandbox", "common", "fileio")
MAX_MODULE_LINES = 500
# Where a branch on one operator is counted: everywhere but the operators' own modules.
BRANCHING = ("engine", "actors", "search", "sandbox", "common", "fileio", "benchmarks")
MAX_OPERATOR_BRANCHES = 10
# Study code never lives beside results: a finished study's code is a tool or deleted.
CODE_SUFFIXES = {".py", ".sh", ".ipynb", ".r", ".R"}


def _modules(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def _where(path: Path, line: int | None = None) -> str:
    name = path.relative_to(ROOT).as_posix()
    return f"{name}:{line}" if line is not None else name


def test_no_product_module_over_500_lines() -> None:
    over = []
    for path in _modules(*PRODUCT):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            over.append(f"{_where(path, MAX_MODULE_LINES + 1)}: {lines} lines")
    if over:
        pytest.fail(f"product modules over {MAX_MODULE_LINES} lines (split a cohesive part into "
                    "a module of its own):\n  " + "\n  ".join(over), pytrace=False)


def test_no_code_under_benchmarks_results_or_probes() -> None:
    results = ROOT / "benchmarks" / "results"
    probes = ROOT / "benchmarks" / "probes"
    found = sorted(p for p in results.rglob("*") if p.is_file() and p.suffix in CODE_SUFFIXES)
    # probes/ held the scripts of past studies, kept as they ran: none is kept any more.
    found += sorted(p for p in probes.rglob("*") if p.is_file()) if probes.exists() else []
    if found:
        pytest.fail("code beside results: a finished study's code becomes a tool in benchmarks/ "
                    "(with a test) or is deleted, and its results folder's README names the "
                    "command:\n  " + "\n  ".join(_where(p) for p in found), pytrace=False)


def _operator_member(node: ast.expr) -> bool:
    """`Operator.X` or `Operator.X.value`."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "Operator" and node.attr.isupper())


def _names_operator(node: ast.expr) -> bool:
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_operator_member(e) for e in node.elts)
    return _operator_member(node)


def operator_branches(path: Path) -> list[int]:
    """The lines that compare something against a named operator (`is Operator.X`,
    `== Operator.X.value`, `in (Operator.X, Operator.Y)`, ...): one per comparison."""
    text = path.read_text(encoding="utf-8")
    if "Operator." not in text:
        return []
    tree = ast.parse(text, filename=str(path))
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
                  and any(_names_operator(side) for side in (node.left, *node.comparators)))


def test_operator_branches_outside_the_operators_modules_are_few() -> None:
    found = [_where(path, line) for path in _modules(*BRANCHING)
             for line in operator_branches(path)]
    if len(found) > MAX_OPERATOR_BRANCHES:
        pytest.fail(f"{len(found)} branches on a named operator outside operators/ (at most "
                    f"{MAX_OPERATOR_BRANCHES}): give the operator a trait "
                    "(search.node.OperatorTraits) or its kind a method (operators.kinds) "
                    "instead:\n  " + "\n  ".join(found), pytrace=False)


def test_operator_branches_are_found(tmp_path: Path) -> None:
    source = tmp_path / "branches.py"
    source.write_text("if node.operator is Operator.TUNE:\n    pass\n"
                      "x = op not in (Operator.BASELINE,\n              Operator.ENSEMBLE)\n"
                      "y = row['operator'] == Operator.ANALYZE.value\n"
                      "z = Proposal(Operator.DRAFT, None)\n"
                      "w = node.operator.traits.draft\n")
    assert operator_branches(source) == [1, 3, 5]


def test_import_contracts_hold() -> None:
    """The import-linter contracts of pyproject.toml (a fraction of a second: it parses
    imports, importing nothing)."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    if not lint_imports.exists():
        pytest.skip("import-linter is not installed (the dev extra); CI's lint step runs it")
    done = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    if done.returncode != 0:
        pytest.fail(f"lint-imports: a contract is broken:\n{done.stdout}{done.stderr}",
                    pytrace=False)
