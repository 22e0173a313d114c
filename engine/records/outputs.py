"""What a finished start leaves beside the Parquet rows: `good/`, `tree.html` and `plots/`.

Everything here is derived from the store (`nodes/*.parquet` plus `manifest.json`), so it can be
rebuilt at any time and never holds a fact the Parquet rows lack. `write_outputs(root)` is the
one entry point the engine calls at the end of each start; it copes with a run of no nodes and
with a run where nothing worked.

`tree.html` is one self-contained file: inline CSS and JS, no libraries, no network; its page,
CSS and script are files shipped with the package (`engine/assets/tree.*`), filled in here. The
nodes are embedded as JSON in a `<script type="application/json">` block and drawn as an SVG by
the page itself. The per-node test score is left out on purpose: the tree is where a person picks
solutions, and picking by test score would make the test split a second validation split.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

from common.metric import METRICS
from engine.evaluation.selection import Selection
from engine.records.runs import StoredRun, open_run
from engine.records.summary import FILES, busy_shares, cost, worker_spans
from fileio import replacing_dir, write_atomic
from search.journal import Journal
from search.node import Node, Status

GOOD_K = 5
# A node's code in tree.html is cut after this many characters: a 10k-node tree must still open.
HTML_CODE_CHARS = 60_000
HTML_TAIL_CHARS = 3_000
STATUS_COLOURS = {
    "ok": "#2e9d4a", "buggy": "#d64541", "timeout": "#e8912d", "oom": "#8e44ad",
    "killed": "#7f8c8d", "lost": "#34495e",
}
BEST_COLOUR = "#f1c40f"


# --- loading ----------------------------------------------------------------------------------


def write_outputs(root: Path) -> None:
    """Write good/, tree.html and plots/ for the run at `root` from what the store holds."""
    run = open_run(root)
    write_good(run.store.root, run.journal, run.tests)
    _write_tree_html(run)
    _write_plots(run)


# --- good/ ------------------------------------------------------------------------------------


def ranked_good(journal: Journal, k: int = GOOD_K) -> list[Node]:
    """The k best eligible nodes by valid metric with distinct code; ties go to the earlier."""
    ranked = sorted(journal.eligible_nodes, key=lambda n: (-(n.metric or 0.0), n.step, n.node_id))
    chosen: list[Node] = []
    seen: set[str] = set()
    for node in ranked:
        key = node.code_hash or node.node_id
        if key in seen or not node.code:
            continue
        seen.add(key)
        chosen.append(node)
        if len(chosen) == k:
            break
    return chosen


def write_good(root: Path, journal: Journal, tests: dict[str, float | None],
               k: int = GOOD_K) -> list[Path]:
    """Keep the top-k distinct working solutions as `good/<rank>-<node_id>/solution.py`.

    The folder is rebuilt whole each time (a resumed run reorders it) and renamed into place.
    """
    good = Path(root) / "good"
    names = []
    with replacing_dir(good) as staging:
        for rank, node in enumerate(ranked_good(journal, k), start=1):
            name = f"{rank}-{node.node_id}"
            folder = staging / name
            folder.mkdir()
            (folder / "solution.py").write_text(node.code)
            meta = {
                "rank": rank, "node_id": node.node_id, "parent_id": node.parent_id,
                "operator": node.operator.value, "step": node.step,
                "metric_raw": node.metric_raw, "test_metric_raw": tests.get(node.node_id),
                "plan": node.plan,
            }
            (folder / "node.json").write_text(json.dumps(meta, indent=2) + "\n")
            names.append(name)
    return [good / name for name in names]


# --- tree.html --------------------------------------------------------------------------------


def _clip(text: str | None, limit: int) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters in nodes/*.parquet)"


def _number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def tree_data(root: Path) -> dict[str, Any]:
    """What tree.html draws: the run's header facts and one record per node (no test scores)."""
    return _tree_data(open_run(root))


def _tree_data(run: StoredRun) -> dict[str, Any]:
    store, rows, journal, manifest = run.store, run.rows, run.journal, run.manifest
    metric_name = str(manifest.get("metric", ""))
    spec = METRICS.get(metric_name)
    best = journal.final()
    nodes = []
    for row in rows:
        failed = row["status"] != Status.OK.value
        node = journal.get(row["node_id"])
        nodes.append({
            "id": row["node_id"], "parent": row["parent_id"], "step": row["step"],
            "depth": row["depth"], "operator": row["operator"], "status": row["status"],
            "metric": _number(row["metric"]), "metric_raw": _number(row["metric_raw"]),
            "plan": row["plan"] or "", "hint": row.get("hint") or "",
            "code": _clip(row["code"], HTML_CODE_CHARS),
            "error": row["error"] or "",
            "stderr": _clip(row["stderr_tail"], HTML_TAIL_CHARS) if failed else "",
            "llm_seconds": row["llm_seconds"] or 0.0, "exec_seconds": row["exec_seconds"] or 0.0,
            "queue_seconds": row["queue_seconds"] or 0.0,
            "prompt_tokens": row["prompt_tokens"] or 0,
            "completion_tokens": row["completion_tokens"] or 0,
            "model": row["model"] or "", "llm_actor": row["llm_actor"] or "",
            "executor": row["executor"] or "", "temperature": row["temperature"],
            "cost": cost(node) if node.is_ok else "",
            "flags": ", ".join(node.flag_list),
            "excluded": "; ".join(journal.constraints.violations(node)) if node.is_ok else "",
            "reflection": row.get("reflection") or "",
            # An analysis node's result is what it printed (the findings came from it).
            "stdout": _clip(row["stdout_tail"], HTML_TAIL_CHARS)
            if node.operator.traits.informs else "",
        })
    return {
        "run_id": store.run_id,
        "target": manifest.get("target", ""),
        "task_type": manifest.get("task_type", ""),
        "metric": metric_name,
        "maximize": bool(spec.maximize) if spec else True,
        "best": best.node_id if best else None,
        "best_valid": best.metric_raw if best else None,
        "best_path": [n.node_id for n in journal.ancestors(best.node_id)] if best else [],
        "selection": _selection_view(run.selection),
        "status_counts": journal.status_counts(),
        "colours": STATUS_COLOURS,
        "nodes": nodes,
    }


def _selection_view(selection: Selection | None) -> dict[str, Any] | None:
    """How the answer was chosen, from the run's record: the rule, why, and how each candidate
    compared, in the summary's words; without test scores, like the rest of the tree."""
    if selection is None or selection.node_id is None:
        return None
    return {"rule": selection.rule, "method": selection.method, "node": selection.node_id,
            "reason": selection.reason(), "search_best": selection.comparison.search_best,
            "candidates": {c.node_id: selection.comparison_text(c)
                           for c in selection.candidates}}


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element: no `<` at all, so neither `</script>` nor `<!--`
    in a node's code can end or confuse the block (`\\u003c` parses back to `<`)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def write_tree_html(root: Path) -> Path:
    """Write `tree.html`: the whole search tree in one file that needs no network."""
    return _write_tree_html(open_run(root))


def _write_tree_html(run: StoredRun) -> Path:
    root = run.store.root
    data = _tree_data(run)
    title = f"treeml run {data['run_id']}".replace("<", "").replace("&", "")
    html = (_asset("tree.html").replace("__TITLE__", title)
            .replace("__CSS__", _asset("tree.css")).replace("__JS__", _asset("tree.js"))
            .replace("__DATA__", embed_json(data)))
    out = root / "tree.html"
    write_atomic(out, html)
    return out


def _asset(name: str) -> str:
    """A file of tree.html's page (the page, its CSS and its script), shipped with the package."""
    return resources.files("engine").joinpath("assets").joinpath(name).read_text(encoding="utf-8")


# --- plots ------------------------------------------------------------------------------------


def write_plots(root: Path) -> list[Path]:
    """Write plots/best_over_time.png, plots/nodes_by_status.png and plots/timeline.png."""
    return _write_plots(open_run(root))


def _write_plots(run: StoredRun) -> list[Path]:
    # Imported here: matplotlib costs about a second, and only the end of a start needs it.
    # Figure without pyplot: no global backend or figure registry (Agg renders the PNGs).
    from matplotlib.figure import Figure

    root, rows, journal, tests = run.store.root, run.rows, run.journal, run.tests
    metric = str(run.manifest.get("metric", "metric"))
    folder = root / "plots"
    folder.mkdir(exist_ok=True)
    t0 = min((_start(r) for r in rows), default=0.0)
    out = []
    for name, draw in (("best_over_time.png", _plot_best), ("nodes_by_status.png", _plot_status),
                       ("timeline.png", _plot_timeline)):
        fig = draw(Figure, rows, journal, tests, metric, t0)
        path = folder / name
        fig.savefig(path, dpi=110)
        out.append(path)
    return out


def _start(row: dict[str, Any]) -> float:
    return float(row["created_at"] or row["finished_at"] or 0.0)


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _plot_best(figure: Any, rows: list[dict[str, Any]], journal: Journal,
               tests: dict[str, float | None], metric: str, t0: float) -> Any:
    fig = figure(figsize=(12, 4.5))
    by_time, by_count = fig.subplots(1, 2)
    fig.suptitle(f"Best valid {metric} so far")
    done = sorted(rows, key=lambda r: (r["finished_at"] or 0.0, r["step"]))
    times, counts, best_raw, ok_t, ok_n, ok_raw = [], [], [], [], [], []
    best: dict[str, Any] | None = None
    for count, row in enumerate(done, start=1):
        if row["status"] == Status.OK.value and row["metric"] is not None:
            ok_t.append(row["finished_at"] - t0)
            ok_n.append(count)
            ok_raw.append(row["metric_raw"])
            if best is None or row["metric"] > best["metric"]:
                best = row
        if best is not None:
            times.append(row["finished_at"] - t0)
            counts.append(count)
            best_raw.append(best["metric_raw"])
    chosen = journal.final()
    test = tests.get(chosen.node_id) if chosen else None
    for ax, xs, ok_x, xlabel in ((by_time, times, ok_t, "wall time (s)"),
                                 (by_count, counts, ok_n, "nodes finished")):
        if not xs:
            _empty(ax, "no working node yet")
            ax.set_xlabel(xlabel)
            continue
        ax.scatter(ok_x, ok_raw, s=14, color="#95a5a6", label="ok node (valid)", zorder=2)
        ax.step(xs, best_raw, where="post", color=STATUS_COLOURS["ok"], linewidth=2,
                label="best valid", zorder=3)
        if chosen is not None and test is not None:
            at = next(i for i, r in enumerate(done) if r["node_id"] == chosen.node_id)
            x = (done[at]["finished_at"] - t0) if ax is by_time else at + 1
            ax.axhline(test, color="#c0392b", linestyle="--", linewidth=1, zorder=1)
            ax.scatter([x], [test], marker="*", s=140, color="#c0392b", zorder=4,
                       label="best node's test")
            ax.annotate(f"test {test:.4g}", (x, test), textcoords="offset points",
                        xytext=(6, 6), color="#c0392b")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{metric} (raw)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def _plot_status(figure: Any, rows: list[dict[str, Any]], journal: Journal,
                 tests: dict[str, float | None], metric: str, t0: float) -> Any:
    fig = figure(figsize=(12, 4.5))
    over_time, by_op = fig.subplots(1, 2)
    fig.suptitle("Nodes by status")
    if not rows:
        _empty(over_time, "no nodes yet")
        _empty(by_op, "no nodes yet")
        return fig
    done = sorted(rows, key=lambda r: (r["finished_at"] or 0.0, r["step"]))
    statuses = [s.value for s in Status if any(r["status"] == s.value for r in rows)]
    for status in statuses:
        xs, ys, seen = [0.0], [0], 0
        for row in done:
            if row["status"] == status:
                seen += 1
                xs.append(row["finished_at"] - t0)
                ys.append(seen)
        xs.append(done[-1]["finished_at"] - t0)
        ys.append(seen)
        over_time.step(xs, ys, where="post", color=STATUS_COLOURS[status], linewidth=2,
                       label=status)
    over_time.set_xlabel("wall time (s)")
    over_time.set_ylabel("nodes finished (cumulative)")
    over_time.grid(alpha=0.3)
    over_time.legend(fontsize=8)
    per_op = Counter((r["operator"], r["status"]) for r in rows)
    operators = sorted({r["operator"] for r in rows})
    bottom = [0] * len(operators)
    for status in statuses:
        heights = [per_op[(op, status)] for op in operators]
        by_op.bar(operators, heights, bottom=bottom, color=STATUS_COLOURS[status], label=status)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    by_op.set_ylabel("nodes")
    by_op.set_title("by operator", fontsize=10)
    by_op.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _plot_timeline(figure: Any, rows: list[dict[str, Any]], journal: Journal,
                   tests: dict[str, float | None], metric: str, t0: float) -> Any:
    spans = {worker: [(start - t0, seconds, STATUS_COLOURS.get(status, "#999") if
                       worker[0] == "exec" else "#3b7dd8") for start, seconds, status in bars]
             for worker, bars in worker_spans(journal).items()}
    workers = sorted(spans, key=lambda w: (w[0] != "llm", w[1]))
    fig = figure(figsize=(12, 1.2 + 0.55 * max(1, len(workers))))
    ax = fig.subplots()
    ax.set_title("Worker timeline: LLM generation (blue) and execution (by status)")
    if not workers:
        _empty(ax, "no worker activity recorded")
        return fig
    end = max(float(r["finished_at"] or 0.0) - t0 for r in rows) or 1.0
    shares = busy_shares(journal)
    labels = []
    for i, worker in enumerate(workers):
        bars = spans[worker]
        ax.broken_barh([(s, max(w, end / 2000)) for s, w, _ in bars], (i - 0.35, 0.7),
                       facecolors=[c for _, _, c in bars], edgecolor="none")
        labels.append(f"{worker[1]} ({shares.get(worker[1], 0.0):.0%} busy)")
    ax.set_yticks(range(len(workers)))
    ax.set_yticklabels(labels)
    ax.set_ylim(-0.6, len(workers) - 0.4)
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1.01)
    ax.set_xlabel("wall time (s)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def existing_files(root: Path) -> list[tuple[str, str]]:
    """FILES entries present under `root` (globs and folders checked for content)."""
    found = []
    for name, what in FILES:
        present = any(root.glob(name)) if "*" in name else (root / name).exists()
        if present:
            found.append((name, what))
    return found
