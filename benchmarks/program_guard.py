"""Do the embedded backend's decoding guards save the feature programs that the checks would
refuse? (issue 42: each refused program is an LLM call counted against `--llm-patience`)

    python -m benchmarks.program_guard RUN [RUN ...] [--all] [--out DIR]

For each run, the feature programs it saw refused as repeats of a computation scored on their
feature set (with `--refused`, every program the checks refused; with `--all`, every program
it asked for). Each one's prompt is written as today's
engine writes it, from the run's journal as it stood before that program
(`benchmarks.program_speed.program_steps`; a program still being scored then counts as scored),
and answered by the embedded model twice, at the program's temperature and a seed of its step:
with the guards today's engine asks for (`actors.name_guard`: the target's name anywhere, the
columns a computation reads, the second column of a pair already tried, text kept out of
arithmetic, a kept column not assigned again) and with none (the prompt's never_names,
column_names, never_computations, text_names and kept_names emptied). Today's engine reads each
reply as the step would (`Features.read`: the checks on its text): it would run, or it is
refused as a repeat, for a column the rows lack, or for another reason.

Reported (`program_guard.md`; each reply in `program_guard.jsonl`): per arm, the programs, how
many would run, the refusals by kind, and the median LLM seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.cli import add_shared_flags
from benchmarks.program_speed import ProgramStep, program_steps
from common.chat import ChatPrompt, Reply
from common.errors import UserError, error_exit
from fileio import write_atomic
from operators.kinds import kind_of
from operators.kinds.features import REPEATS
from search.node import Operator
from search.programs import REJECTED

ARMS = ("guarded", "unguarded")
OUTCOMES = ("runs", "repeat", "unknown column", "other refusal")
# What the checks' refusal of a column the rows lack says (operators.features.check_program
# on the text, and its check on the rows).
UNKNOWN_COLUMN = "the rows do not have"


def outcome(problem: str) -> str:
    """A reply's fate from what `Features.read` says of it ("" when it would run)."""
    if not problem:
        return "runs"
    if REPEATS in problem:
        return "repeat"
    return "unknown column" if UNKNOWN_COLUMN in problem else "other refusal"


def unguarded(prompt: ChatPrompt) -> ChatPrompt:
    """The prompt with nothing for the backend to steer its decoding by."""
    return dataclasses.replace(prompt, never_names=(), column_names=(), never_computations=(),
                               text_names=(), kept_names=())


def replayed(steps: Sequence[ProgramStep],
             generate: Callable[[ChatPrompt], Reply]) -> list[dict[str, object]]:
    """Each step's two replies, read by today's engine: one record per step and arm."""
    kind = kind_of(Operator.FEATURES)
    records: list[dict[str, object]] = []
    for step in steps:
        prompt = dataclasses.replace(kind.prompt(step.ctx, step.proposal, step.before),
                                     seed=step.node.step)
        for arm, asked in zip(ARMS, (prompt, unguarded(prompt)), strict=True):
            reply = generate(asked)
            problem = kind.read(reply.text, step.ctx, step.proposal, step.before).problem
            records.append({"node": step.node.node_id, "step": step.node.step, "arm": arm,
                            "outcome": outcome(problem), "problem": problem,
                            "seconds": reply.seconds, "reply": reply.text})
    return records


def table(records: Sequence[dict[str, object]]) -> str:
    lines = ["| arm | programs | " + " | ".join(OUTCOMES) + " | median LLM s |",
             "|---|---|" + "---|" * len(OUTCOMES) + "---|"]
    for arm in ARMS:
        mine = [r for r in records if r["arm"] == arm]
        if not mine:
            continue
        counts = " | ".join(str(sum(r["outcome"] == o for r in mine)) for o in OUTCOMES)
        seconds = statistics.median(float(str(r["seconds"])) for r in mine)
        lines.append(f"| {arm} | {len(mine)} | {counts} | {seconds:.1f} |")
    return "\n".join(lines) + "\n"


def chosen(run: Path, which: str) -> list[ProgramStep]:
    """The run's programs to replay: those refused as repeats ("repeats"), those refused by
    the checks ("refused"), or all of them ("all")."""
    steps = program_steps(run)
    if which == "all":
        return steps
    refusal = REPEATS if which == "repeats" else REJECTED
    return [s for s in steps if refusal in s.node.error]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.program_guard",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+",
                        help="run directories (runs/<id>) whose search wrote feature programs")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_const", const="all", dest="which",
                       default="repeats",
                       help="replay every feature program, not only those refused as repeats")
    which.add_argument("--refused", action="store_const", const="refused", dest="which",
                       help="replay every feature program the checks refused, for any reason")
    add_shared_flags(parser, out="runs/program-guard",
                     out_help="program_guard.md and program_guard.jsonl go here")
    args = parser.parse_args(argv)
    try:
        steps = {run: chosen(run, args.which) for run in args.runs}
        if not any(steps.values()):
            raise UserError(f"none of the runs has a program to replay ({args.which}): pass "
                            "--all to replay every program")
        from actors.llama_backend import LlamaLLM

        records: list[dict[str, object]] = []
        # one model per run: each prompt finds the previous one's prefix in the cache
        for run, mine in steps.items():
            with LlamaLLM(seed=0) as llm:
                for record in replayed(mine, lambda p: llm.generate([p])[0]):
                    records.append({"run": str(run), **record})
                    print(f"{run.name} step {record['step']} {record['arm']}: "
                          f"{record['outcome']}", flush=True)
    except UserError as exc:
        return error_exit(exc)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "program_guard.md", table(records))
    write_atomic(args.out / "program_guard.jsonl",
                 "".join(json.dumps(r) + "\n" for r in records))
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
