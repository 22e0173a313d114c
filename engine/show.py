"""Command line: `python -m engine.show runs/<id> [--nodes]`: a run's summary in the terminal.

Prints what `summary.md` holds (task, budget spent, best valid/test, best path, counts by
status, tokens, how the answer was chosen, the LLM's feature programs, top errors, where files
are) as rich tables, read fresh from the store, so it also works on a run that is still going
or was killed; `--nodes` adds one row per node.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from common.errors import EngineError, UserError, error_exit
from common.metric import METRICS
from engine.records.outputs import existing_files
from engine.records.runs import open_run
from engine.records.summary import (
    overview,
    programs_section,
    selection_section,
    shown_path,
    summary_facts,
    top_errors,
)
from search.journal import Journal

_STATUS_STYLE = {"ok": "green", "buggy": "red", "timeout": "yellow", "oom": "magenta",
                 "killed": "dim", "lost": "dim"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine.show",
                                     description="Print a run's summary (and its nodes).")
    parser.add_argument("run", type=Path, help="the run directory, runs/<run_id>")
    parser.add_argument("--nodes", action="store_true", help="also list every node")
    return parser


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.5g}"


def show(run: Path, console: Console, *, nodes: bool = False) -> None:
    if not (run / "manifest.json").is_file() or not (run / "task").is_dir():
        raise UserError(f"{run} is not a run directory (no manifest.json and task/); "
                        "pass runs/<run_id>")
    loaded = open_run(run)
    store, manifest, tests, journal = loaded.store, loaded.manifest, loaded.tests, loaded.journal
    selection = loaded.selection
    facts = summary_facts(journal, tests, dict(manifest.get("spent", {})), selection)
    facts["llm"] = manifest.get("config", {}).get("llm", "")
    metric = str(manifest.get("metric", ""))
    spec = METRICS.get(metric)

    head = Table(title=f"Run {store.run_id}", show_header=False, title_justify="left")
    head.add_column(style="bold")
    head.add_column()
    for label, value in overview(journal, facts, target=str(manifest.get("target", "")),
                                 task_type=str(manifest.get("task_type", "")), metric=metric,
                                 maximize=spec.maximize if spec else True,
                                 selection=selection):
        head.add_row(Text(label), Text(value))
    console.print(head)

    path = shown_path(journal)
    if path:
        table = Table(title="Best path", title_justify="left")
        for name in ("step", "node", "operator", f"valid {metric}"):
            table.add_column(name)
        for step, row in path:
            if row is None:
                table.add_row(step, "", "", "")
            else:
                table.add_row(step, row["node_id"], row["operator"], _fmt(row["metric_raw"]))
        console.print(table)

    # summary.md's own sections, rendered: why this answer, the LLM's feature programs
    for section in (selection_section(selection, metric), programs_section(journal, facts)):
        if section:
            console.print(Markdown("\n".join(section)))

    errors = top_errors(journal)
    if errors:
        table = Table(title="Top errors", title_justify="left")
        table.add_column("error")
        table.add_column("nodes", justify="right")
        for error, count in errors:
            table.add_row(Text(error), str(count))
        console.print(table)

    files = Table(title=f"Files (in {run})", title_justify="left", show_header=False)
    files.add_column(style="cyan", no_wrap=True)
    files.add_column()
    for name, what in existing_files(run):
        files.add_row(Text(name), Text(what))
    console.print(files)

    if nodes:
        console.print(node_table(journal, metric, console.width))


def node_table(journal: Journal, metric: str, width: int) -> Table:
    """One row per node. Ids and numbers never shrink; the error gets what width is left (the
    parent column goes first on a narrow terminal), wrapping rather than vanishing."""
    columns = {"step": 4, "node": 12, "parent": 12, "operator": 8, "status": 7,
               f"valid {metric}": max(7, len(metric) + 6), "exec s": 6}
    if width < 100:
        del columns["parent"]
    table = Table(title=f"Nodes ({len(journal)})", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, show_edge=False, collapse_padding=True)
    for name, min_width in columns.items():
        table.add_column(name, justify="right" if name in ("step", "exec s") else "left",
                         no_wrap=True, min_width=min_width)
    table.add_column("error", overflow="fold", ratio=1)
    for node in sorted(journal, key=lambda n: n.step):
        cells: list[str | Text] = [str(node.step), node.node_id]
        if "parent" in columns:
            cells.append(node.parent_id or "")
        cells += [
            node.operator.value,
            Text(node.status.value, style=_STATUS_STYLE.get(node.status.value, "")),
            _fmt(node.metric_raw), f"{node.exec_seconds:.1f}",
            Text((node.error.splitlines() or [""])[0][:100]),
        ]
        table.add_row(*cells)
    return table


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(soft_wrap=False, highlight=False)
    try:
        show(args.run, console, nodes=args.nodes)
    except EngineError as exc:
        return error_exit(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
