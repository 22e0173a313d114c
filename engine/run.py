"""Command line: `python -m engine.run --data FILE.csv --target COL [...]`.

It parses the arguments and drives the run object (engine/search_run.py), as `engine.api.fit`
does. Bad input ends with one line on stderr and exit code 2 before anything is written under
the output folder; the engine's own failures exit 1; Ctrl-C stops gracefully (exit 130) with
every finished node stored.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from common.errors import EngineError, error_exit
from engine.config import (
    CommandParser,
    RunConfig,
    add_flags,
    flag_values,
    is_task_file,
    load_task_yaml,
    merge,
)

EPILOG = """examples:
  python -m engine.run --data benchmarks/data/concrete-strength/concrete.csv --target strength
  python -m engine.run --task task.yaml --budget 2h
  python -m engine.run --task "predict churn from data/telco.csv, maximise AUC" --budget 1h
  python -m engine.run --data train.csv --target label --llm scripted:replies.json --quiet
  python -m engine.run --address auto --llm vllm:Qwen/Qwen2.5-Coder-32B-Instruct --tp 2 \
      --llm-replicas 4 --llm-resource llm --executors 32 --executor-resource executor \
      --task task.yaml --budget 2h
  python -m engine.run --llm 'openai:http://127.0.0.1:8000/v1#MODEL' --task task.yaml
  python -m engine.run --llm 'draft,improve=vllm:BIG;debug=vllm:SMALL' --task task.yaml
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="python -m engine.run", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="LLM tree search over ML scripts for a tabular task, on Ray.",
    )
    p.add_argument("--task", metavar="FILE_OR_TEXT",
                   help="task.yaml holding any of these flags as keys (flags given win), or "
                        "the task in words: \"predict COLUMN from FILE.csv, maximise AUC, "
                        "under 5 ms per row\" (the spec is shown and written to "
                        "runs/<id>/task.yaml)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR",
                   help="continue a stopped run (runs/<run_id>); --budget sets this start's "
                        "budget (default: what the run had left)")
    add_flags(p)
    return p


def config_from_args(args: argparse.Namespace, console: Console | None = None) -> RunConfig:
    overrides = flag_values(args)
    if args.task is not None and not is_task_file(args.task):
        base = request_config(args.task, overrides, console or Console(soft_wrap=True))
    else:
        base = load_task_yaml(Path(args.task)) if args.task else RunConfig()
    return merge(base, overrides).validate()


def request_config(text: str, overrides: dict[str, Any], console: Console) -> RunConfig:
    """A plain-language --task: parse it, ask the run's LLM for what the words leave open (only
    then is an LLM made), check it against the data and show the spec."""
    from actors.llm import parse_spec
    from engine.task.request_llm import resolve_request

    provisional = merge(RunConfig(), overrides)
    parse_spec(provisional.llm)  # a bad --llm is reported before any model is made

    def make_llm() -> Any:
        from actors.llm import make_llm as make
        from engine.placement import spec_options

        spec = provisional.routes.specs[0]  # the first (or only) model answers
        options = spec_options(provisional, spec)
        if "n_threads" in options:  # the embedded model: nothing else runs yet: every core
            options["n_threads"] = os.cpu_count() or 1
        console.print(f"asking the LLM ({spec}) what the request leaves open",
                      markup=False, highlight=False)
        return make(spec, **options)

    # --llm none: what the words leave open is an error that says what to add to them.
    request = resolve_request(text, flags=overrides,
                              llm=None if provisional.routes.none else make_llm)
    console.print(request.describe(), markup=False, highlight=False)
    return RunConfig(**request.config_values())


def main(argv: list[str] | None = None) -> int:
    console = Console(soft_wrap=True)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0), or a bad flag, already said in one line (2)
        return int(exc.code or 0)
    try:
        # Here, not at the top: the run object imports Ray, and --help or a bad flag should
        # answer without it.
        from engine.search_run import SearchRun

        if args.resume is not None:
            flags = {k: v for k, v in flag_values(args).items() if v is not None}
            run = SearchRun.resume(args.resume, flags, console)
        else:
            run = SearchRun.new(config_from_args(args, console), console)
        run.start()
    except EngineError as exc:
        return error_exit(exc)
    except KeyboardInterrupt:
        print("stopped by Ctrl-C; finished nodes are stored", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
