"""Exports of finished runs: fine-tuning data (seed 001), `python -m engine.export sft RUN...
-o FILE`, and the answer as a deployable folder, `python -m engine.export model RUN -o DIR`
(engine/deploy/bundle.py).

The fine-tuning data:

Each example is one successful step of a search, as the model saw it and answered it: a draft
that ran, a debug step that fixed its parent, an improve step that beat its parent's valid
score (by at least `--min-gain` in the normalised metric, higher is better), an analysis
script that ran. The prompt is the one stored with the node (the chat sent for the code); it
is not rebuilt, since a prompt depends on the Journal at the moment it was built (siblings
already tried, findings, the reflection). Nodes stored before prompts were recorded are
skipped and counted. With a repair re-ask the first question is paired with the final reply.

Formats: `sharegpt` and `alpaca` as LLaMA-Factory reads them, `messages` as TRL's SFTTrainer
reads them; every line also carries run_id, node_id, operator, gain, task and a few more
fields for filtering.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from common.errors import EngineError, StoreError, UserError, error_exit
from engine.records.runs import open_run
from fileio import write_atomic

FORMATS = ("sharegpt", "alpaca", "messages")


def _gain(row: dict[str, Any], rows: dict[str, dict[str, Any]], min_gain: float) -> (
        tuple[bool, float | None]):
    """(whether the step succeeded, its gain over the parent in the normalised metric)."""
    if row["status"] != "ok":
        return False, None
    operator = row["operator"]
    if operator == "analyze":
        return True, None
    if row["metric"] is None:
        return False, None
    if operator in ("draft", "debug"):  # a draft has no parent; a debug's parent failed
        return True, None
    parent = rows.get(row["parent_id"] or "")
    if operator != "improve" or parent is None or parent["metric"] is None:
        return False, None
    gain = float(row["metric"]) - float(parent["metric"])
    return gain > 0 and gain >= min_gain, gain


def _task_name(manifest: dict[str, Any]) -> str:
    data = Path(str(manifest.get("config", {}).get("data") or "data")).name
    return (f"{data}: {manifest.get('target')} ({manifest.get('task_type')}, "
            f"{manifest.get('metric')})")


def runs_in(path: Path) -> list[Path]:
    """A run directory, or every run directory below a folder (benchmarks nest them)."""
    if (path / "manifest.json").is_file():
        return [path]
    runs = sorted(m.parent for m in path.rglob("manifest.json")
                  if not any(part.startswith(".") for part in m.relative_to(path).parts))
    if not runs:
        raise UserError(f"{path} is not a run directory (no manifest.json) and holds none; "
                        "pass run directories, e.g. runs/*")
    return runs


def run_examples(run_dir: Path, min_gain: float, skipped: Counter[str]) -> list[dict[str, Any]]:
    """The successful steps of one run, as format-free examples."""
    try:
        run = open_run(run_dir)
    except StoreError as exc:
        raise UserError(f"cannot export {run_dir}: {exc}") from exc
    manifest, rows = run.manifest, run.rows
    by_id = {r["node_id"]: r for r in rows}
    task = _task_name(manifest)
    examples = []
    for row in rows:
        ok, gain = _gain(row, by_id, min_gain)
        if not ok:
            continue
        if not row.get("prompt") or not row.get("reply"):
            skipped["without a stored prompt"] += 1
            continue
        messages = json.loads(row["prompt"])
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        question = next(m["content"] for m in messages if m["role"] == "user")
        examples.append({
            "system": system, "prompt": question, "reply": row["reply"],
            "run_id": manifest.get("run_id", run_dir.name), "node_id": row["node_id"],
            "parent_id": row["parent_id"], "operator": row["operator"], "gain": gain,
            "metric": manifest.get("metric"), "metric_raw": row["metric_raw"], "task": task,
            "model": row["model"], "repaired": sum(m["role"] == "user" for m in messages) > 1,
            "reflected": bool(row.get("reflection")),
        })
    return examples


def to_format(example: dict[str, Any], fmt: str) -> dict[str, Any]:
    """One JSON line: the conversation in `fmt`, then the metadata fields."""
    system, prompt, reply = example["system"], example["prompt"], example["reply"]
    meta = {k: v for k, v in example.items() if k not in ("system", "prompt", "reply")}
    if fmt == "sharegpt":
        body: dict[str, Any] = {"conversations": [
            {"from": "system", "value": system}, {"from": "human", "value": prompt},
            {"from": "gpt", "value": reply}]}
    elif fmt == "alpaca":
        body = {"instruction": prompt, "input": "", "output": reply, "system": system}
    else:
        body = {"messages": [
            {"role": "system", "content": system}, {"role": "user", "content": prompt},
            {"role": "assistant", "content": reply}]}
    return {**body, **meta}


def export_sft(run_dirs: Iterable[Path], out: Path, fmt: str = "sharegpt",
               min_gain: float = 0.0) -> tuple[Counter[str], Counter[str], int]:
    """Write the examples of every run to `out` (whole or not at all); returns the examples
    per operator, the skipped nodes per reason and the number of runs read."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    given = list(run_dirs)
    if not given:
        raise UserError("no run directories given; pass some, e.g. runs/*")
    dirs = [run for path in given for run in runs_in(path)]
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: folder {out.parent} does not exist")
    skipped: Counter[str] = Counter()
    examples = [e for path in dirs for e in run_examples(path, min_gain, skipped)]
    if not examples:
        reason = "".join(f"; {n} {why}" for why, n in skipped.items())
        raise UserError(f"no successful steps to export in {len(dirs)} run(s){reason}; "
                        "nothing written")
    write_atomic(out, "".join(json.dumps(to_format(example, fmt), ensure_ascii=False) + "\n"
                              for example in examples))
    return Counter(e["operator"] for e in examples), skipped, len(dirs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine.export",
                                description="Export data from finished runs.")
    commands = p.add_subparsers(dest="command", required=True)
    sft = commands.add_parser(
        "sft", help="(prompt, reply) pairs of successful steps, for supervised fine-tuning",
        description="Write (prompt, reply) pairs of successful steps (drafts that ran, debugs "
                    "that fixed, improves that improved, analyses that ran) as JSON lines.")
    sft.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR",
                     help="run directories, or folders holding them (searched "
                          "recursively), e.g. runs/*")
    sft.add_argument("-o", "--output", type=Path, required=True, help="the .jsonl file to write")
    sft.add_argument("--format", choices=FORMATS, default="sharegpt",
                     help="sharegpt (LLaMA-Factory, default), alpaca (LLaMA-Factory), "
                          "messages (TRL)")
    sft.add_argument("--min-gain", type=float, default=0.0,
                     help="keep an improve step only if it beat its parent by at least this "
                          "much in the normalised valid metric (higher is better; default 0: "
                          "any improvement)")
    model = commands.add_parser(
        "model", help="the run's answer as a folder that predicts without treeml installed",
        description="Write the answer's code, its saved fitted models, the rows they learned "
                    "from, a predict.py and a requirements.txt to a new folder "
                    "(engine/deploy/bundle.py).")
    model.add_argument("run", type=Path, metavar="RUN_DIR", help="the run directory")
    model.add_argument("-o", "--output", type=Path, required=True,
                       help="the folder to write (new, or empty)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "model":
        from engine.deploy.bundle import export_model

        try:
            written = export_model(args.run, args.output)
        except EngineError as exc:
            return error_exit(exc)
        print(f"wrote {args.output}: {written['models']} model(s), "
              f"{written['bytes'] / 2**20:.1f} MiB; requirements: "
              f"{', '.join(written['requirements'])}")
        return 0
    try:
        per_operator, skipped, runs = export_sft(args.runs, args.output, args.format,
                                                 args.min_gain)
    except EngineError as exc:
        return error_exit(exc)
    counts = ", ".join(f"{n} {op}" for op, n in sorted(per_operator.items()))
    extra = "".join(f"; skipped {n} {why}" for why, n in skipped.items())
    print(f"wrote {sum(per_operator.values())} examples ({counts}) from {runs} run(s) to "
          f"{args.output} ({args.format}){extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
