"""The user guide stays true to the code: README.md documents every flag RunConfig declares and
every flag of `python -m engine.serve`, and the relative links of README.md,
benchmarks/README.md and the studies' Markdown under benchmarks/results/ (files and section
anchors) resolve, so moving a section cannot leave a link pointing at nothing."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from engine.config import add_flags
from engine.serve import build_parser as serve_parser

ROOT = Path(__file__).resolve().parent.parent
GUIDES = (ROOT / "README.md", ROOT / "benchmarks" / "README.md",
          *sorted((ROOT / "benchmarks" / "results").rglob("*.md")))


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.*)$", doc.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _missing_rows(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's flags that no row of a README.md flag table names."""
    flags = [s for action in parser._actions for s in action.option_strings
             if s.startswith("--") and s != "--help"]
    rows = [line for line in (ROOT / "README.md").read_text().splitlines()
            if line.startswith("| `--")]
    assert flags
    return [f for f in flags if not any(re.match(rf"\| `{re.escape(f)}[ `|]", r) for r in rows)]


def test_readme_has_a_row_for_every_run_flag() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    assert len(parser._actions) > 20
    missing = _missing_rows(parser)
    assert not missing, f"README.md's flag table lacks {missing}"


def test_readme_has_a_row_for_every_serve_flag() -> None:
    missing = _missing_rows(serve_parser())
    assert not missing, f"README.md's Serve the answer table lacks {missing}"


@pytest.mark.parametrize("doc", GUIDES, ids=lambda d: str(d.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)  # code is not a link
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists() or (anchor and dest.suffix == ".md"
                                 and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"{doc.name}: {broken}"
