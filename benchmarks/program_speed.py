"""How long does the embedded model take to write a feature program, and where does the time
go? (issue 42: a median of at most 15 s per program)

    python -m benchmarks.program_speed RUN [--threads 1,2] [--busy 0,1] [--prompts 5]
        [--rebuild] [--max-tokens N] [--out DIR]

Replays the feature-program prompts that run RUN stored (its `features` nodes' last prompt, in
step order) through the embedded model, once per setting: `threads` llama.cpp threads beside
`busy` processes that each keep one core busy, as a candidate in training holds an executor's
core. The model is loaded once per setting, so each prompt finds the previous one's prefix in
the cache, as in the run. Each prompt is answered with its node's temperature and a seed of its
step, so the settings write the same replies and their times compare; each reply begins as the
engine begins one today (`operators.kinds.features.reply_start`), whatever the run's did;
with `--rebuild`, each prompt is also written as today's engine would write it, from the run's
journal as it stood before that program. Replies are capped as the engine caps them today
(`operators.kinds.features.MAX_TOKENS`), or at `--max-tokens`: two replays on one machine then
say what a cap costs, apart from that machine's speed on the day.

Reported per setting (`program_speed.md`, each reply in `program_speed.jsonl`): the median
seconds per program, the median completion tokens, and the seconds of the prompts after the
first (which read only what changed since the previous prompt).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.cli import add_shared_flags
from common.chat import ChatPrompt, Reply
from common.errors import UserError, error_exit
from engine.records.runs import open_run
from engine.search_run import task_context
from fileio import write_atomic
from operators.context import TaskContext
from operators.kinds import kind_of
from operators.kinds.features import MAX_TOKENS, STOP, reply_start
from search.journal import Journal
from search.node import Node, Operator
from search.policy import Proposal

# A busy core that stops when its parent does, even one killed by a signal (no `finally`).
# (Its parent's pid is its argument: one read at its own start could be init's already.) It
# says when it spins: a started interpreter is not yet a busy core.
SPIN = "import os, sys\nprint(flush=True)\nwhile os.getppid() == int(sys.argv[1]): pass"


def stored_prompts(run: Path, limit: int, max_tokens: int = MAX_TOKENS) -> list[ChatPrompt]:
    """The first `limit` feature-program prompts that `run` asked, in step order."""
    stored = open_run(run)
    nodes = sorted((n for n in stored.journal.nodes_of(Operator.FEATURES) if n.prompt),
                   key=lambda n: n.step)
    if not nodes:
        raise UserError(f"run {run} stored no feature-program prompt: run a search with the "
                        "LLM (not --llm none) first")
    return [ChatPrompt(messages=json.loads(n.prompt), max_tokens=max_tokens,
                       temperature=n.temperature, seed=n.step, tag="features", stop=STOP,
                       reply_start=reply_start(stored.journal, n.parent_id))
            for n in nodes[:limit]]


@dataclasses.dataclass(frozen=True)
class ProgramStep:
    """One feature program of a stored run, with what today's engine would write its prompt
    from: the task's context, the run's journal as it stood before the program (the nodes of
    earlier steps) and the program's proposal."""

    node: Node
    ctx: TaskContext
    before: Journal
    proposal: Proposal


def program_steps(run: Path, limit: int | None = None) -> list[ProgramStep]:
    """The first `limit` (None: all) feature programs of `run`, in step order."""
    stored = open_run(run)
    nodes = sorted(stored.journal.nodes_of(Operator.FEATURES), key=lambda n: n.step)[:limit]
    if not nodes:
        raise UserError(f"run {run} has no feature program: run a search with the LLM (not "
                        "--llm none) first")
    ctx = task_context(stored.task(), 0)
    return [ProgramStep(node, ctx, Journal([n for n in stored.journal.nodes
                                            if n.step < node.step]),
                        Proposal(Operator.FEATURES, node.parent_id, node.temperature))
            for node in nodes]


def rebuilt_prompts(run: Path, limit: int, max_tokens: int = MAX_TOKENS) -> list[ChatPrompt]:
    """The first `limit` feature-program prompts of `run` as today's engine writes them: each
    from the run's journal as it stood before that program, so a change to the prompt's
    layout is measured on a run made before it."""
    kind = kind_of(Operator.FEATURES)
    return [dataclasses.replace(kind.prompt(step.ctx, step.proposal, step.before),
                                seed=step.node.step, max_tokens=max_tokens)
            for step in program_steps(run, limit)]


@contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """`count` processes that each keep one core busy until the block ends, each spinning
    before the block begins."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())],
                                 stdout=subprocess.PIPE) for _ in range(count)]
    try:
        for spinner in spinners:
            assert spinner.stdout is not None
            spinner.stdout.readline()
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.communicate()


def summary(replies: Sequence[Reply]) -> dict[str, float]:
    """Median seconds and completion tokens per program, and the median seconds of the
    programs after the first (the first reads its whole prompt)."""
    later = [r.seconds for r in replies[1:]] or [replies[0].seconds]
    return {"programs": len(replies),
            "median_seconds": statistics.median(r.seconds for r in replies),
            "median_completion_tokens": statistics.median(r.completion_tokens for r in replies),
            "median_seconds_after_first": statistics.median(later),
            "first_seconds": replies[0].seconds}


def measure(prompts: list[ChatPrompt], settings: list[tuple[int, int]],
            load: Callable[[int], Any]) -> Iterator[tuple[int, int, list[Reply]]]:
    """Each (threads, busy) setting's replies, from a model `load(threads)` made for it."""
    for threads, busy in settings:
        with busy_cores(busy):
            llm = load(threads)
            try:
                yield threads, busy, [llm.generate([p])[0] for p in prompts]
            finally:
                llm.close()


def table(results: list[tuple[int, int, list[Reply]]]) -> str:
    lines = ["| llama.cpp threads | busy cores beside it | programs | median s | median "
             "completion tokens | median s after the first | first s |",
             "|---|---|---|---|---|---|---|"]
    for threads, busy, replies in results:
        s = summary(replies)
        lines.append(f"| {threads} | {busy} | {s['programs']} | {s['median_seconds']:.1f} | "
                     f"{s['median_completion_tokens']:.0f} | "
                     f"{s['median_seconds_after_first']:.1f} | {s['first_seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def _numbers(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 0:
        raise UserError(f"{flag} takes comma-separated whole numbers >= 0, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.program_speed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory (runs/<id>) whose search "
                        "wrote feature programs")
    parser.add_argument("--threads", default="1,2", help="llama.cpp thread counts (default 1,2)")
    parser.add_argument("--busy", default="0,1",
                        help="busy cores beside the model, each a setting (default 0,1)")
    parser.add_argument("--prompts", type=int, default=5,
                        help="how many of the run's prompts to replay (default 5)")
    parser.add_argument("--rebuild", action="store_true",
                        help="write each prompt as today's engine would from the run's journal "
                             "before it, instead of replaying the prompt the run stored")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS,
                        help=f"cap on each reply's tokens (default {MAX_TOKENS}, the engine's)")
    add_shared_flags(parser, out="runs/program-speed",
                     out_help="program_speed.md and program_speed.jsonl go here")
    args = parser.parse_args(argv)
    try:
        settings = [(t, b) for t in _numbers(args.threads, "--threads")
                    for b in _numbers(args.busy, "--busy")]
        if min(t for t, _ in settings) < 1:
            raise UserError("--threads must be at least 1")
        if args.max_tokens < 1:
            raise UserError(f"--max-tokens must be at least 1, got {args.max_tokens}")
        prompts = (rebuilt_prompts if args.rebuild else stored_prompts)(
            args.run, args.prompts, args.max_tokens)
        from actors.llama_backend import LlamaLLM

        results = []
        for threads, busy, replies in measure(prompts, settings,
                                              lambda n: LlamaLLM(n_threads=n, seed=0)):
            results.append((threads, busy, replies))
            print(f"threads {threads}, busy {busy}: "
                  f"{', '.join(f'{r.seconds:.1f} s' for r in replies)}", flush=True)
    except UserError as exc:
        return error_exit(exc)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "program_speed.md", table(results))
    write_atomic(args.out / "program_speed.jsonl", "".join(
        json.dumps({"threads": threads, "busy": busy, "seed": prompt.seed,
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "seconds": reply.seconds, "reply": reply.text}) + "\n"
        for threads, busy, replies in results
        for prompt, reply in zip(prompts, replies, strict=True)))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
