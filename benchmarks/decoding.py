"""Does prompt-lookup speculative decoding make the embedded model write improve and debug
replies faster? (issue 25, item 5)

    python -m benchmarks.decoding [--suite lite] [--lookup 10] [--out DIR]

Improve and debug replies mostly copy their parent's code, which sits in the prompt: prompt
lookup (llama-cpp-python's `LlamaPromptLookupDecoding`) drafts the next tokens from the
longest matching n-gram of the prompt and the model verifies them in one batch. For every task
of the suite, an improve prompt and a debug prompt are built by the engine's own operators
around the engine's portfolio code (the parents the search improves most), and each is
answered twice, greedy (temperature 0) and with the same seed: once plainly, once with
lookup. Reported per prompt and overall: completion tokens, seconds, tokens per second, and
whether the two replies are identical (greedy decoding with a correct verifier must give the
same text). Writes `decoding.md` and `decoding.jsonl` under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.cli import add_shared_flags
from benchmarks.datasets import suite
from common.chat import ChatPrompt
from common.errors import UserError, error_exit
from engine.search_run import task_context
from engine.task.prepare import TaskSpec, prepare_task
from operators.harness import assemble
from operators.kinds import build_prompt
from operators.models import model_code
from search.families import PORTFOLIO
from search.journal import Journal
from search.node import Node, Operator, Status, code_hash
from search.policy import Proposal


def prompts_for(name: str, data: Path, target: str) -> list[tuple[str, ChatPrompt]]:
    """An improve and a debug prompt of one task, around the portfolio's LightGBM code."""
    task = prepare_task(TaskSpec(data, target, None, None, ""))
    ctx = task_context(task, 0)
    _, family, params = next(p for p in PORTFOLIO if p[1] == "lgbm")
    code = assemble(ctx, model_code(ctx, family, params))
    ok = Node(node_id="parent", parent_id=None, operator=Operator.PORTFOLIO, status=Status.OK,
              code=code, code_hash=code_hash(code), metric=0.5, metric_raw=0.5)
    broken = Node(node_id="broken", parent_id=None, operator=Operator.DRAFT,
                  status=Status.BUGGY, step=1, code=code.replace("model.fit(X, y)",
                                                                 "model.fit(X, y_valid)"),
                  code_hash="b", error="NameError: name 'y_valid' is not defined")
    journal = Journal([ok, broken])
    improve = build_prompt(ctx, Proposal(Operator.IMPROVE, "parent", 0.0,
                                         idea="add a few engineered features"), journal)
    debug = build_prompt(ctx, Proposal(Operator.DEBUG, "broken", 0.0), journal)
    return [(f"{name}/improve", improve), (f"{name}/debug", debug)]


def make_llama(lookup: int) -> Any:
    from actors.llama_backend import LlamaLLM

    return LlamaLLM(n_threads=os.cpu_count() or 1, seed=0, lookup=lookup)


def answer(llm: Any, prompt: ChatPrompt) -> dict[str, Any]:
    started = time.perf_counter()
    (reply,) = llm.generate([replace(prompt, temperature=0.0, seed=0)])
    seconds = time.perf_counter() - started
    return {"text": reply.text, "tokens": reply.completion_tokens, "seconds": seconds}


def measure(prompts: list[tuple[str, ChatPrompt]], lookup: int) -> list[dict[str, Any]]:
    """Each prompt answered plainly and with lookup; one model each, loaded once, and every
    prompt answered once before timing so both start with the prompt in the KV cache."""
    rows: list[dict[str, Any]] = [{"prompt": name} for name, _ in prompts]
    for arm, size in (("plain", 0), ("lookup", lookup)):
        llm = make_llama(size)
        try:
            for row, (_, prompt) in zip(rows, prompts, strict=True):
                answer(llm, replace(prompt, max_tokens=1))  # the prompt evaluated and cached
                got = answer(llm, prompt)
                row[f"{arm}_tokens"], row[f"{arm}_seconds"] = got["tokens"], got["seconds"]
                row[f"{arm}_text"] = got["text"]
                print(f"{row['prompt']} {arm}: {got['tokens']} tokens in "
                      f"{got['seconds']:.1f} s", flush=True)
        finally:
            llm.close()
    for row in rows:
        row["identical"] = row["plain_text"] == row["lookup_text"]
    return rows


def table(rows: list[dict[str, Any]], lookup: int) -> str:
    lines = [f"| prompt | tokens (plain / lookup {lookup}) | tok/s plain | tok/s lookup | "
             "speed-up | same reply |", "|---|---|---|---|---|---|"]

    def rate(tokens: float, seconds: float) -> float:
        return tokens / seconds if seconds else 0.0

    for row in rows:
        plain = rate(row["plain_tokens"], row["plain_seconds"])
        fast = rate(row["lookup_tokens"], row["lookup_seconds"])
        lines.append(f"| {row['prompt']} | {row['plain_tokens']} / {row['lookup_tokens']} | "
                     f"{plain:.1f} | {fast:.1f} | {fast / plain if plain else 0:.2f}x | "
                     f"{'yes' if row['identical'] else 'no'} |")
    plain = rate(sum(r["plain_tokens"] for r in rows), sum(r["plain_seconds"] for r in rows))
    fast = rate(sum(r["lookup_tokens"] for r in rows), sum(r["lookup_seconds"] for r in rows))
    same = sum(r["identical"] for r in rows)
    lines.append(f"| **all** | {sum(r['plain_tokens'] for r in rows)} / "
                 f"{sum(r['lookup_tokens'] for r in rows)} | {plain:.1f} | {fast:.1f} | "
                 f"{fast / plain if plain else 0:.2f}x | {same}/{len(rows)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shared_flags(parser, suite="lite", out="runs/decoding",
                     out_help="where decoding.md and decoding.jsonl go")
    parser.add_argument("--lookup", type=int, default=10,
                        help="tokens drafted per lookup (default 10)")
    args = parser.parse_args(argv)
    try:
        if args.lookup < 1:
            raise UserError("--lookup must be at least 1")
        prompts = [p for d in suite(args.suite) for p in prompts_for(d.name, d.path, d.target)]
    except UserError as exc:
        return error_exit(exc)
    rows = measure(prompts, args.lookup)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decoding.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = table(rows, args.lookup)
    (args.out / "decoding.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
