"""The flags the benchmarks share: declared once, with each benchmark's own defaults and help,
and only the ones it takes."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli import LLM_HELP, add_shared_flags
from benchmarks.run import build_parser


def test_only_the_flags_given_a_default_are_added() -> None:
    parser = argparse.ArgumentParser()
    add_shared_flags(parser, suite="lite", out="runs/x", out_help="where x goes")
    args = parser.parse_args([])
    assert vars(args) == {"suite": "lite", "out": Path("runs/x")}
    assert parser.parse_args(["--out", "elsewhere"]).out == Path("elsewhere")


def test_help_is_shared_unless_a_benchmark_says_more() -> None:
    parser = argparse.ArgumentParser()
    add_shared_flags(parser, budget="15m", llm="llama", out="runs/q", out_help="where q goes")
    helps = {a.dest: a.help for a in parser._actions}
    assert helps["budget"] == "search budget per task (default 15m)"
    assert helps["llm"] == LLM_HELP
    assert helps["out"] == "where q goes"


def test_the_suite_runner_keeps_its_defaults() -> None:
    args = build_parser().parse_args([])
    assert (args.suite, args.budget, args.llm, args.out) == ("lite", "10m", "llama",
                                                             Path("runs/bench"))
    helps = {a.dest: a.help for a in build_parser()._actions}
    assert helps["budget"] == "wall-clock budget per search (default 10m)"
    assert helps["llm"] == "LLM spec for the searches (default llama)"
