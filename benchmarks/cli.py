"""The flags that the benchmarks' command lines share (`--suite`, `--budget`, `--llm`, `--out`),
declared once: the same names, types and help everywhere, each benchmark giving only its own
defaults and, where it says more, its own help."""

from __future__ import annotations

import argparse
from pathlib import Path

SUITE_HELP = "suite name or comma-separated datasets"
LLM_HELP = "LLM spec (default: embedded model)"


def add_shared_flags(parser: argparse.ArgumentParser, *, out: str, out_help: str,
                     suite: str | None = None, suite_help: str = SUITE_HELP,
                     budget: str | None = None, budget_help: str = "search budget per task",
                     llm: str | None = None, llm_help: str = LLM_HELP) -> None:
    """Add `--out` (a Path), and `--suite`, `--budget` and `--llm` where the benchmark gives
    them a default (None: the benchmark does not take that flag). The budget's help ends with
    its default."""
    if suite is not None:
        parser.add_argument("--suite", default=suite, help=suite_help)
    if budget is not None:
        parser.add_argument("--budget", default=budget, help=f"{budget_help} (default {budget})")
    if llm is not None:
        parser.add_argument("--llm", default=llm, help=llm_help)
    parser.add_argument("--out", type=Path, default=Path(out), help=out_help)
