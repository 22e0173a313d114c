"""What a run leaves for a person: `summary.md`, one screen, readable without our code."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from engine.task import PreparedTask
from search.journal import Journal


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.5g}"


def best_path(journal: Journal) -> list[dict[str, Any]]:
    best = journal.best()
    if best is None:
        return []
    return [
        {"node_id": n.node_id, "operator": n.operator.value, "status": n.status.value,
         "metric_raw": n.metric_raw}
        for n in journal.ancestors(best.node_id)
    ]


def summary_facts(journal: Journal, tests: dict[str, float | None],
                  spent: dict[str, Any]) -> dict[str, Any]:
    best = journal.best()
    drafts = [n for n in journal.draft_nodes if n.code]
    ran = [n for n in drafts if n.exec_seconds > 0 or n.is_ok]
    return {
        "best_node": best.node_id if best else None,
        "best_valid": best.metric_raw if best else None,
        "best_test": tests.get(best.node_id) if best else None,
        "best_operator": best.operator.value if best else None,
        "status_counts": journal.status_counts(),
        "drafts_ok_without_debug": sum(n.is_ok for n in drafts),
        "drafts_run": len(ran),
        **spent,
    }


def write_summary(root: Path, task: PreparedTask, journal: Journal,
                  tests: dict[str, float | None], facts: dict[str, Any]) -> Path:
    best = journal.best()
    direction = "higher" if task.metric.maximize else "lower"
    counts = ", ".join(f"{k} {v}" for k, v in journal.status_counts().items() if v)
    errors = Counter(
        n.error.split(":")[0][:60] for n in journal if n.is_buggy and n.error
    ).most_common(3)
    tokens = facts.get("prompt_tokens", 0) + facts.get("completion_tokens", 0)
    lines = [
        f"# Run {root.name}",
        "",
        f"- task: predict `{task.target}` ({task.task_type}), metric {task.metric.name} "
        f"({direction} is better)",
        f"- best valid {task.metric.name}: {_fmt(facts.get('best_valid'))}"
        f" | its test {task.metric.name}: {_fmt(facts.get('best_test'))}"
        + (f" (node {best.node_id}, {best.operator.value})" if best else " (no working node)"),
        f"- nodes: {len(journal)} ({counts or 'none'})",
        f"- drafts that ran without a debug step: {facts.get('drafts_ok_without_debug', 0)}"
        f" of {facts.get('drafts_run', 0)}",
        f"- tokens: {tokens} ({facts.get('prompt_tokens', 0)} prompt, "
        f"{facts.get('completion_tokens', 0)} completion), "
        f"LLM {facts.get('llm_seconds', 0.0):.0f}s",
        f"- time: {facts.get('seconds', 0.0):.0f}s of a {facts.get('budget', 0.0):.0f}s budget"
        + (f"; stopped by {facts['stopped_by']}" if facts.get("stopped_by") else ""),
        "",
    ]
    path = best_path(journal)
    if path:
        lines += ["## Best path", "", "| step | node | operator | valid |", "|---|---|---|---|"]
        lines += [
            f"| {i} | {p['node_id']} | {p['operator']} | {_fmt(p['metric_raw'])} |"
            for i, p in enumerate(path)
        ]
        lines.append("")
    if errors:
        lines += ["## Top errors", ""] + [f"- {e} ({n}x)" for e, n in errors] + [""]
    lines += [
        "## Files",
        "",
        "- `best/solution.py`, `best/submission/`: the best solution and its predictions",
        "- `nodes/*.parquet`: every node (open with `pandas.read_parquet('nodes')`)",
        "- `manifest.json`: configuration, data hash, budget spent",
        "",
    ]
    out = root / "summary.md"
    out.write_text("\n".join(lines))
    return out
