"""Do replies that hold only the change make improve steps cheaper without breaking them?
(issue 25, item 5)

    python -m benchmarks.edits [--suite concrete-strength,credit-g] [--ideas 3] [--out DIR]

Improve replies copy their parent's code: on the lite runs of 2026-11-25 three quarters of the
embedded model's time went to writing completion tokens, and an improve reply held about 550.
This asks every improve prompt twice, greedy (temperature 0), on the engine's own portfolio
LightGBM code as the parent and the first `--ideas` ideas of the floor's feature pool:

- `whole`: the engine's improve prompt as it is (return the whole updated model code);
- `edit`: the same prompt, asking instead for search/replace blocks against the current code.

A reply is usable when its code (the whole reply parsed as the engine parses it; the edit
blocks applied to the parent, every search text found) parses, defines fit_predict and differs
from the parent; it runs when that code, in the harness, runs in the sandbox on the task's
holdout split and writes its predictions. Reported: completion tokens, seconds, usable and
running replies per arm. Writes `edits.md` and `edits.jsonl` under --out.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
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
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from operators.context import TaskContext
from operators.harness import assemble, model_part
from operators.kinds import build_prompt
from operators.models import model_code
from operators.replies import parse_reply
from sandbox import Limits, run_script
from search.families import PORTFOLIO
from search.ideas import NUMERIC_FEATURE_IDEAS
from search.journal import Journal
from search.node import Node, Operator, Status, code_hash
from search.policy import Proposal

WHOLE_ASK = "Return the whole updated model code."
EDIT_ASK = (
    "Reply with only the lines that change, as one or more blocks of this form:\n"
    "<<<<<<< SEARCH\n(lines copied exactly from the current model code)\n=======\n"
    "(the lines that replace them)\n>>>>>>> REPLACE"
)
BLOCK = re.compile(r"<<<<<<< SEARCH\n(.*?)\n?=======\n(.*?)\n?>>>>>>> REPLACE", re.DOTALL)


def apply_edits(code: str, reply: str) -> tuple[str, str]:
    """`code` with the reply's search/replace blocks applied, and the problem ("" if none): a
    block's search text must occur in the code (exactly, else line by line with trailing
    spaces ignored)."""
    blocks = BLOCK.findall(reply)
    if not blocks:
        return code, "no edit block"
    for i, (search, replacement) in enumerate(blocks, 1):
        if search and search in code:
            code = code.replace(search, replacement, 1)
            continue
        lines = [line.rstrip() for line in code.splitlines()]
        wanted = [line.rstrip() for line in search.splitlines()]
        at = next((k for k in range(len(lines) - len(wanted) + 1)
                   if wanted and lines[k:k + len(wanted)] == wanted), None)
        if at is None:
            return code, f"block {i}: search text not in the code"
        lines[at:at + len(wanted)] = replacement.splitlines()
        code = "\n".join(lines) + "\n"
    return code, ""


def usable(code: str, parent: str) -> str:
    """Why model code is not usable ("" when it is)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == "fit_predict" for n in tree.body):
        return "no fit_predict"
    if code.strip() == parent.strip():
        return "unchanged"
    return ""


def cases(name: str, data: Path, target: str, ideas: int
          ) -> list[tuple[str, PreparedTask, TaskContext, str, ChatPrompt]]:
    """(label, task, ctx, parent model code, improve prompt) for the first `ideas` ideas."""
    task = prepare_task(TaskSpec(data, target, None, None, ""))
    ctx = task_context(task, 0)
    _, family, params = next(p for p in PORTFOLIO if p[1] == "lgbm")
    parent_code = model_code(ctx, family, params)
    code = assemble(ctx, parent_code)
    parent = Node(node_id="parent", parent_id=None, operator=Operator.PORTFOLIO,
                  status=Status.OK, code=code, code_hash=code_hash(code), metric=0.5,
                  metric_raw=0.5)
    out = []
    for idea in NUMERIC_FEATURE_IDEAS[:ideas]:
        prompt = build_prompt(ctx, Proposal(Operator.IMPROVE, "parent", 0.0, idea=idea),
                              Journal([parent]))
        out.append((f"{name}: {idea[:40]}", task, ctx, model_part(code), prompt))
    return out


def with_ask(prompt: ChatPrompt, ask: str) -> ChatPrompt:
    messages = [dict(m) for m in prompt.messages]
    text = messages[-1]["content"]
    if WHOLE_ASK not in text:
        raise ValueError("the improve prompt no longer ends with its whole-code ask")
    messages[-1]["content"] = text.replace(WHOLE_ASK, ask)
    return replace(prompt, messages=messages, temperature=0.0, seed=0)


def runs(task: PreparedTask, ctx: TaskContext, model: str) -> str:
    """The sandbox's error for the model code in the harness ("" when it ran and wrote its
    predictions)."""
    result = run_script(assemble(ctx, model), task.inputs(), Limits(wall_seconds=120))
    if result.status != "ok" or result.valid_csv is None:
        return result.error or result.status
    return ""


def measure(llm: Any, labelled: list[tuple[str, PreparedTask, TaskContext, str, ChatPrompt]]
            ) -> list[dict[str, Any]]:
    rows = []
    for label, task, ctx, parent, prompt in labelled:
        for arm, ask in (("whole", WHOLE_ASK), ("edit", EDIT_ASK)):
            asked = with_ask(prompt, ask)
            llm.generate([replace(asked, max_tokens=1)])  # the prompt evaluated and cached
            started = time.perf_counter()
            (reply,) = llm.generate([asked])
            seconds = time.perf_counter() - started
            if arm == "whole":
                parsed = parse_reply(reply.text, ctx)
                code = model_part(parsed.code) if parsed.code else ""
                problem = parsed.problem or usable(code, parent)
            else:
                code, problem = apply_edits(parent, reply.text)
                problem = problem or usable(code, parent)
            error = problem or runs(task, ctx, code)
            rows.append({"case": label, "arm": arm, "tokens": reply.completion_tokens,
                         "seconds": round(seconds, 2), "usable": not problem,
                         "runs": not error, "error": error, "reply": reply.text})
            print(f"{label} {arm}: {reply.completion_tokens} tokens in {seconds:.1f} s, "
                  f"{error or 'runs'}", flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| arm | replies | completion tokens (mean) | seconds (mean) | tokens/s | usable | "
             "runs |", "|---|---|---|---|---|---|---|"]
    for arm in ("whole", "edit"):
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        tokens = sum(r["tokens"] for r in mine)
        seconds = sum(r["seconds"] for r in mine)
        lines.append(f"| {arm} | {len(mine)} | {tokens / len(mine):.0f} | "
                     f"{seconds / len(mine):.1f} | {tokens / seconds if seconds else 0:.1f} | "
                     f"{sum(r['usable'] for r in mine)}/{len(mine)} | "
                     f"{sum(r['runs'] for r in mine)}/{len(mine)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shared_flags(parser, suite="concrete-strength,credit-g", out="runs/edits",
                     out_help="where edits.md and edits.jsonl go")
    parser.add_argument("--ideas", type=int, default=3,
                        help=f"improve ideas per task (at most {len(NUMERIC_FEATURE_IDEAS)})")
    args = parser.parse_args(argv)
    try:
        if not 1 <= args.ideas <= len(NUMERIC_FEATURE_IDEAS):
            raise UserError(f"--ideas must be 1 to {len(NUMERIC_FEATURE_IDEAS)}")
        labelled = [c for d in suite(args.suite)
                    for c in cases(d.name, d.path, d.target, args.ideas)]
    except UserError as exc:
        return error_exit(exc)
    from actors.llama_backend import LlamaLLM

    llm = LlamaLLM(n_threads=os.cpu_count() or 1, seed=0)
    try:
        rows = measure(llm, labelled)
    finally:
        llm.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "edits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = table(rows)
    (args.out / "edits.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
