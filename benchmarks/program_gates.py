"""Does the keep rule pick the feature programs that help on the test rows? (issue 42)

    python -m benchmarks.program_gates PATH [PATH ...] [--out FILE]

Every feature program scored in the runs under PATH (run directories, found at any depth): its
gate (the gain over its reference, the same configuration without it, per group of held-out
rows) and the same comparison on the test rows, which the search never saw (the node's test
score against its reference's, signed so that above zero the program helped; relative to the
reference's test score, so that tasks compare). Programs are grouped by what their gains show:
the rule of today's engine (`search.programs.keep_rule`) and the tallies below it. For each
group: how many, how many helped on the test rows, and the median relative test gain.

A rule is only as good as the share of its programs that help on the test rows, against the
share of the rest: the command that chose a rule should be run again on measurements made
after it was chosen.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError, error_exit
from common.metric import METRICS
from engine.records.runs import open_run
from fileio import write_atomic
from search.node import Operator
from search.programs import TIE, gate_of, keep_rule


@dataclass(frozen=True)
class ScoredProgram:
    run: str
    node_id: str
    kept: bool  # as the run decided, by its engine's rule
    gains: tuple[float, ...]  # per group of held-out rows, higher is better
    test_gain: float  # on the test rows, higher is better
    relative_test_gain: float  # test_gain over the reference's test score


def run_dirs(paths: Sequence[Path]) -> list[Path]:
    """The run directories at or under `paths` (a folder with manifest.json and task/)."""
    found = {p.parent for path in paths for p in
             ([path / "manifest.json"] if (path / "manifest.json").is_file()
              else path.rglob("manifest.json")) if (p.parent / "task").is_dir()}
    return sorted(found)


def check_folders(paths: Sequence[Path]) -> None:
    """One line for the first path that is not a folder of runs."""
    missing = [p for p in paths if not p.is_dir()]
    if missing:
        raise UserError(f"{missing[0]} is not a folder: pass run directories or a "
                        "benchmarks.run --out")


def scored_programs(run: Path) -> Iterator[ScoredProgram]:
    """The run's feature programs with a gate and a test score for them and their reference."""
    stored = open_run(run)
    maximize = METRICS[str(stored.manifest["metric"])].maximize
    for node in stored.journal.nodes_of(Operator.FEATURES):
        gate = gate_of(node)
        if gate is None:
            continue
        test, reference = stored.tests.get(node.node_id), stored.tests.get(gate.reference)
        if test is None or reference is None or reference == 0:
            continue
        gain = (test - reference) if maximize else (reference - test)
        yield ScoredProgram(str(run), node.node_id, gate.kept, gate.gains, gain,
                            gain / abs(reference))


def _better(program: ScoredProgram) -> int:
    return sum(g > TIE for g in program.gains)


def _positive(program: ScoredProgram) -> bool:
    return statistics.fmean(program.gains) > TIE if program.gains else False


# The groups of the table, each a name and which programs it holds.
GROUPS: list[tuple[str, Callable[[ScoredProgram], bool]]] = [
    ("kept by the run", lambda p: p.kept),
    ("not kept by the run", lambda p: not p.kept),
    ("kept by today's rule (better on every group)", lambda p: keep_rule(p.gains)[0]),
    ("not kept by today's rule", lambda p: not keep_rule(p.gains)[0]),
    # the rule of 827264c to d0ad860 (4 of 5 and a positive mean) kept these too
    ("positive mean, better on all groups but one",
     lambda p: _positive(p) and _better(p) == len(p.gains) - 1),
    ("positive mean, better on fewer groups",
     lambda p: _positive(p) and _better(p) < len(p.gains) - 1),
    ("mean gain at most zero", lambda p: not _positive(p)),
]


def table(programs: Sequence[ScoredProgram]) -> str:
    lines = [f"{len(programs)} scored programs in {len({p.run for p in programs})} runs", "",
             "| programs | how many | helped on the test rows | median relative test gain |",
             "|---|---|---|---|"]
    for name, holds in GROUPS:
        mine = [p for p in programs if holds(p)]
        if not mine:
            lines.append(f"| {name} | 0 | n/a | n/a |")
            continue
        helped = sum(p.test_gain > 0 for p in mine)
        median = statistics.median(p.relative_test_gain for p in mine)
        lines.append(f"| {name} | {len(mine)} | {helped} ({helped / len(mine):.0%}) | "
                     f"{median:+.3%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.program_gates",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", type=Path, nargs="+",
                        help="run directories, or folders holding them at any depth "
                             "(a benchmarks.run --out)")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    try:
        check_folders(args.paths)
        programs = [p for run in run_dirs(args.paths) for p in scored_programs(run)]
        if not programs:
            raise UserError("no scored feature program with test scores under "
                            f"{', '.join(map(str, args.paths))}: run searches with the LLM "
                            "(not --llm none) first")
    except UserError as exc:
        return error_exit(exc)
    text = table(programs)
    if args.out is not None:
        write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
