"""How much of the floor's best scores is its seed's luck? (issue 42)

    python -m benchmarks.seed_luck PATH [PATH ...] [--seeds 7] [--top 3] [--out FILE.md]

In each run under PATH, the `--top` best engine-written nodes of a seeded model family (every
trial fits with seed 0) are run again in the sandbox, every fold in one process as the floor
runs them, with seeds 1 to `--seeds`: the same configuration, feature set and folds. Their
valid scores against the node's own say how far the best of many trials stands above what
its configuration scores on another seed: the winner's curse of the search's selection, which
a feature program's gate must not be compared with (engine/evaluation/program_gate.py). The
test scores say whether the seed that won on valid is better anywhere else. Scores are in
the metric's own units (RMSE, log loss, AUC); "gap" is the node's own minus the other seeds'
mean, signed so that above zero the own seed looked better.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.program_gates import check_folders, run_dirs
from benchmarks.program_pairs import Replay
from common.errors import UserError, error_exit
from engine.evaluation.scoring import (
    SubmissionError,
    read_stacked,
    read_submission,
    score_held_out,
)
from fileio import write_atomic
from operators.context import TaskContext
from operators.features import feature_programs
from operators.harness import assemble
from operators.models import TRIAL_SEED, model_code, seeded
from sandbox import Limits, run_script
from search.floor import configuration
from search.journal import Journal
from search.node import Node
from search.programs import TIE


@dataclass(frozen=True)
class Reseeded:
    run: str
    node_id: str
    family: str
    maximize: bool
    own_valid: float
    own_test: float
    valid: tuple[float, ...]  # with seeds 1, 2, ...
    test: tuple[float, ...]

    def gap(self, own: float, others: Sequence[float]) -> float:
        """Own minus the other seeds' mean, above zero when the own seed looked better."""
        gap = own - statistics.fmean(others)
        return gap if self.maximize else -gap


def top_nodes(journal: Journal, ctx: TaskContext, top: int) -> list[Node]:
    """The best eligible engine-written nodes of a seeded family, best first."""
    nodes = [n for n in journal.eligible_nodes if n.operator.traits.configured
             and n.metric is not None and seeded(ctx, configuration(n).family)]
    return sorted(nodes, key=lambda n: (-(n.metric or 0.0), n.step))[:top]


def reseeded(run: Path, seeds: int, top: int) -> Iterator[Reseeded]:
    replay = Replay.open(run)
    if replay is None:
        return
    stored, task, folds, ctx = replay.stored, replay.task, replay.folds, replay.ctx
    inputs, truth = replay.inputs, replay.truth
    for node in top_nodes(stored.journal, ctx, top):
        proposal = configuration(node)
        model = model_code(ctx, proposal.family, proposal.param_dict,
                           feature_programs(node.code))
        valid, test = [], []
        for seed in range(1, seeds + 1):
            code = assemble(ctx, model.replace(TRIAL_SEED, f"random_state={seed}"),
                            all_folds=True)
            result = run_script(code, inputs, Limits(wall_seconds=900))
            try:
                if result.status != "ok":
                    raise SubmissionError(f"{result.status}: {result.error}")
                held = score_held_out(
                    task, truth,
                    [read_submission(task, result.valid_csv, "valid", len(folds.held_out))],
                    [folds.held_out],
                    read_stacked(task, result.test_csv, "test", len(task.test_X), folds.k))
            except SubmissionError as exc:
                print(f"{run.name} {node.node_id} seed {seed}: {exc}", file=sys.stderr)
                break
            valid.append(held.valid_raw)
            test.append(held.test_raw)
        own_test = stored.tests.get(node.node_id)
        if len(valid) == seeds and node.metric_raw is not None and own_test is not None:
            yield Reseeded(str(run), node.node_id, proposal.family, task.metric.maximize,
                           node.metric_raw, own_test, tuple(valid), tuple(test))


def table(found: Sequence[Reseeded]) -> str:
    lines = ["| run | node | family | valid: own / other seeds' mean (min to max) | valid gap "
             "| test: own / other seeds' mean | test gap |", "|---|---|---|---|---|---|---|"]
    for r in found:
        lines.append(
            f"| {'/'.join(Path(r.run).parts[-5:-2])} "
            f"| {r.node_id} | {r.family} | {r.own_valid:.4g} / {statistics.fmean(r.valid):.4g} "
            f"({min(r.valid):.4g} to {max(r.valid):.4g}) | {r.gap(r.own_valid, r.valid):+.4g} "
            f"| {r.own_test:.4g} / {statistics.fmean(r.test):.4g} "
            f"| {r.gap(r.own_test, r.test):+.4g} |")
    # Refitting the same model reorders float sums: a gap within TIE is no luck.
    above = sum(r.gap(r.own_valid, r.valid) > TIE for r in found)
    test_above = sum(r.gap(r.own_test, r.test) > TIE for r in found)
    lines += ["", f"{len(found)} nodes: the own seed looked better than the other seeds' mean "
              f"on valid for {above}, on test for {test_above}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.seed_luck",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", type=Path, nargs="+",
                        help="run directories, or folders holding them at any depth "
                             "(a benchmarks.run --out)")
    parser.add_argument("--seeds", type=int, default=7, help="other seeds per node (default 7)")
    parser.add_argument("--top", type=int, default=3,
                        help="best nodes per run to run again (default 3)")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    try:
        if args.seeds < 1 or args.top < 1:
            raise UserError("--seeds and --top must be at least 1")
        check_folders(args.paths)
        found = [r for run in run_dirs(args.paths) for r in reseeded(run, args.seeds, args.top)]
        if not found:
            raise UserError("no engine-written node of a seeded family under "
                            f"{', '.join(map(str, args.paths))}")
    except UserError as exc:
        return error_exit(exc)
    text = table(found)
    if args.out is not None:
        write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
