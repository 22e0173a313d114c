"""How well does a feature program's gate tell the programs that help? Fresh pairs against the
reference's stored predictions (issue 42).

    python -m benchmarks.program_pairs PATH [PATH ...] [--seeds 6] [--gate-seeds 3]
                                       [--records FILE.jsonl] [--out FILE.md]

Every feature program scored in the runs under PATH is run again in the sandbox as the engine
runs one today (its reference configuration on its chain, every fold in one process), with
`--seeds` fresh pairs: the configuration with and without the program, fitted on every fold
with seeds 1, 2, ... Its first `--gate-seeds` pairs are what a gate of that many pairs sees
on the run's folds; the others, scored on the test rows only, are the truth: the program's
mean test gain over fits the gate never saw, on rows the search never saw.

The table compares, for each gate, which programs `search.programs.keep_rule` keeps and how
many of those help by the truth:

- the run's gate: the program's node against the reference's stored predictions (the
  reference is the best of the floor's trials, and so partly its seed's luck);
- fresh pairs, averaged over the first 1, 2, ... `--gate-seeds` seeds.

`--records` keeps every program's gains (JSON lines); a PATH that is such a file is read back
instead of run again, so that the table of several measurements is one command. Run it alone:
it takes a core for a few seconds a program.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.program_gates import run_dirs
from common.errors import UserError, error_exit
from engine.evaluation.folds import Folds, all_folds_inputs, dev_labels
from engine.evaluation.program_gate import fresh_pairs, group_gains
from engine.evaluation.scoring import (
    SubmissionError,
    combine_predictions,
    read_stacked,
    submission_metric,
)
from engine.records.runs import StoredRun, open_run
from engine.search_run import task_context
from engine.task.prepare import PreparedTask
from fileio import write_atomic
from operators.context import TaskContext
from operators.features import feature_programs
from operators.harness import assemble
from operators.models import model_code
from sandbox import Limits, run_script
from search.node import Operator
from search.policy import Proposal
from search.programs import gate_of, keep_rule


@dataclass(frozen=True)
class Paired:
    """One program's gains: `run_gains` the run's gate (per group), `seed_gains` each fresh
    pair's (per seed, per group), `test_gains` each fresh pair's on the test rows."""

    run: str
    node_id: str
    added: tuple[str, ...]
    run_kept: bool
    run_gains: tuple[float, ...]
    seed_gains: tuple[tuple[float, ...], ...]
    test_gains: tuple[float, ...]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Paired:
        """A program read back from a --records line."""
        return cls(str(record["run"]), str(record["node_id"]), tuple(record["added"]),
                   bool(record["run_kept"]), tuple(record["run_gains"]),
                   tuple(tuple(g) for g in record["seed_gains"]), tuple(record["test_gains"]))


def _test_gain(task: PreparedTask, blocks: pd.DataFrame, block: int, folds: int) -> float:
    """A fresh pair's gain on the test rows (block `block` with the program, the next one
    without), each side's fold models combined as the engine combines them."""
    scores = []
    for arm in (block, block + 1):
        part = blocks[blocks["block"] == arm].drop(columns="block")
        frames = read_stacked(task, part.to_csv(index=False).encode(), "test", len(task.test_X),
                              folds)
        scores.append(task.metric.normalise(submission_metric(
            task, combine_predictions(task, frames), task.test_y)))
    return scores[0] - scores[1]


@dataclass(frozen=True)
class Replay:
    """A stored run opened to run its nodes again in the sandbox, on its own folds."""
    stored: StoredRun
    task: PreparedTask
    folds: Folds
    ctx: TaskContext
    inputs: dict[str, bytes]  # every fold's input files, as the floor's runs get them
    truth: pd.Series  # the held-out rows' labels

    @classmethod
    def open(cls, run: Path) -> Replay | None:
        """The run at `run`, or None when it stored no folds (a holdout run)."""
        stored = open_run(run)
        task = stored.task()
        folds = stored.store.load_folds()
        if folds is None:
            return None
        return cls(stored, task, folds, task_context(task, int(stored.config.get("seed", 0))),
                   all_folds_inputs(task, folds), dev_labels(task).iloc[folds.held_out])


def paired_programs(run: Path, seeds: int, scratch: Path) -> Iterator[Paired]:
    """Each scored feature program of the run at `run`, run again with `seeds` fresh pairs."""
    replay = Replay.open(run)
    if replay is None:
        return
    stored, task, folds, ctx = replay.stored, replay.task, replay.folds, replay.ctx
    inputs, truth = replay.inputs, replay.truth
    for node in sorted(stored.journal.nodes_of(Operator.FEATURES), key=lambda n: n.step):
        gate = gate_of(node)
        if gate is None or not gate.gains:
            continue
        proposal = Proposal.of(node)
        code = assemble(ctx, model_code(
            ctx, proposal.family, proposal.param_dict, feature_programs(node.code), check=True,
            gate_seeds=tuple(range(1, seeds + 1)), gate_test=True), all_folds=True)
        workdir_root = Path(tempfile.mkdtemp(dir=scratch))
        try:
            result = run_script(code, inputs, Limits(wall_seconds=900),
                                workdir_root=workdir_root, keep_workdir=True)
            if result.status != "ok" or result.gate_csv is None:
                print(f"{run.name} {node.node_id}: {result.status} {result.error}",
                      file=sys.stderr)
                continue
            (workdir,) = [p for p in workdir_root.iterdir() if p.is_dir()]
            test_blocks = pd.read_csv(workdir / "submission" / "gate_test.csv")
            pairs = fresh_pairs(task, result.gate_csv, len(folds.held_out))
            seed_gains = tuple(tuple(group_gains(task, truth, w, wo, folds.groups()))
                               for w, wo in pairs)
            tests = tuple(_test_gain(task, test_blocks, 2 * i, folds.k)
                          for i in range(len(pairs)))
        except SubmissionError as exc:
            print(f"{run.name} {node.node_id}: {exc}", file=sys.stderr)
            continue
        finally:
            shutil.rmtree(workdir_root, ignore_errors=True)
        yield Paired(str(run), node.node_id, gate.added, gate.kept, gate.gains, seed_gains,
                     tests)


def _truth(program: Paired, gate_seeds: int) -> float:
    """The mean test gain of the pairs the gate does not use (a family without a seed has one
    pair, the same fit every time: its test gain)."""
    held = program.test_gains[gate_seeds:] or program.test_gains
    return statistics.fmean(held)


def _row(name: str, kept: Sequence[Paired], everyone: Sequence[Paired],
         gate_seeds: int) -> str:
    helped = sum(_truth(p, gate_seeds) > 0 for p in kept)
    rest = [p for p in everyone if p not in kept]
    rest_helped = sum(_truth(p, gate_seeds) > 0 for p in rest)
    median = statistics.median(_truth(p, gate_seeds) for p in kept) if kept else float("nan")
    return (f"| {name} | {len(kept)} | {helped} ({helped / max(len(kept), 1):.0%}) | "
            f"{median:+.4g} | {rest_helped} of {len(rest)} "
            f"({rest_helped / max(len(rest), 1):.0%}) |")


def table(programs: Sequence[Paired], gate_seeds: int) -> str:
    runs = len({p.run for p in programs})
    helped = sum(_truth(p, gate_seeds) > 0 for p in programs)
    lines = [f"{len(programs)} scored programs in {runs} runs; {helped} help by the truth "
             f"(the mean test gain of pairs {gate_seeds + 1} to "
             f"{len(programs[0].test_gains)})", "",
             "| gate | kept | of which help | median truth gain of the kept | help among "
             "the rest |", "|---|---|---|---|---|"]
    lines.append(_row("the run's (against the reference's stored predictions)",
                      [p for p in programs if keep_rule(p.run_gains)[0]], programs,
                      gate_seeds))
    for m in range(1, gate_seeds + 1):
        def gains(p: Paired, m: int = m) -> list[float]:
            return np.mean(np.array(p.seed_gains[:m]), axis=0).tolist()
        lines.append(_row(f"fresh pairs, {m} seed{'s' if m > 1 else ''}",
                          [p for p in programs if keep_rule(gains(p))[0]], programs,
                          gate_seeds))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.program_pairs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", type=Path, nargs="+",
                        help="run directories, or folders holding them at any depth "
                             "(a benchmarks.run --out)")
    parser.add_argument("--seeds", type=int, default=6,
                        help="fresh pairs fitted per program (default 6)")
    parser.add_argument("--gate-seeds", type=int, default=3,
                        help="of them, how many a gate may use; the rest are the truth "
                             "(default 3)")
    parser.add_argument("--records", type=Path, default=None,
                        help="write every program's gains here (JSON lines)")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    try:
        if not 1 <= args.gate_seeds < args.seeds:
            raise UserError(f"--gate-seeds must be from 1 to --seeds - 1 ({args.seeds - 1}); "
                            f"got {args.gate_seeds}")
        missing = [p for p in args.paths if not p.is_dir() and not p.is_file()]
        if missing:
            raise UserError(f"{missing[0]} does not exist: pass run directories, a "
                            "benchmarks.run --out or a --records file")
        programs = [Paired.from_record(json.loads(line))
                    for path in args.paths if path.is_file()
                    for line in path.read_text().splitlines() if line.strip()]
        with tempfile.TemporaryDirectory() as scratch:
            for run in run_dirs([p for p in args.paths if p.is_dir()]):
                for program in paired_programs(run, args.seeds, Path(scratch)):
                    programs.append(program)
                    print(f"{Path(program.run).name} {program.node_id} {program.added}: "
                          f"truth {_truth(program, args.gate_seeds):+.4g}", file=sys.stderr)
        if not programs:
            raise UserError("no scored feature program under "
                            f"{', '.join(map(str, args.paths))}: run searches with the LLM "
                            "(not --llm none) first")
    except UserError as exc:
        return error_exit(exc)
    if args.records is not None:
        write_atomic(args.records, "".join(json.dumps(asdict(p)) + "\n" for p in programs))
    text = table(programs, args.gate_seeds)
    if args.out is not None:
        write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
