"""The benchmark report's figures (PNG, beside the Markdown): each run's test score per task,
the scores relative to LightGBM with default settings, and the best valid score over time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.report import LGBM, Results, best_so_far, relative_table
from benchmarks.stats import mean
from common.errors import EngineError
from engine.records.store import RunStore


def write_figures(rows: pd.DataFrame, res: Results, out: Path) -> dict[str, str]:
    """Each figure beside the report `out`: {caption: file name}."""
    figures = {}
    scores = out.with_name(f"{out.stem}-scores.png")
    plot_scores(rows, res, scores)
    figures["test score per task: each run a dot, each method's mean a bar"] = scores.name
    curves = out.with_name(f"{out.stem}-curves.png")
    plot_curves(rows, res, curves)
    figures["best valid score over time (baselines: their own validation)"] = curves.name
    relative = out.with_name(f"{out.stem}-relative.png")
    if plot_relative(res, relative):
        figures["test score relative to LightGBM default"] = relative.name
    return figures


def curve(row: dict[Any, Any]) -> list[tuple[float, float]]:
    """(seconds since the run started, valid score) of each scored node or fit of one run."""
    run = Path(str(row["run_dir"]))
    if row["kind"] == "baseline":
        try:
            data = json.loads((run / "result.json").read_text())
        except (OSError, ValueError):
            return []
        return [(float(t), float(v)) for t, v in data.get("curve", [])]
    try:
        nodes = RunStore.open(run).read_rows()
    except EngineError:
        return []  # a run directory on another machine of the cluster
    started = float(row["started_at"])
    return [(float(r["finished_at"]) - started, float(r["metric_raw"])) for r in nodes
            if r["metric_raw"] is not None]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(rows: pd.DataFrame, res: Results, path: Path) -> None:
    plt = _pyplot()
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(res.methods)}
    cols = min(3, len(res.tasks))
    nrows = math.ceil(len(res.tasks) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    for ax, task in zip(axes.flat, res.tasks, strict=False):
        for row in rows[rows.task == task].to_dict("records"):
            points = best_so_far(curve(row), res.maximize[task])
            if points:
                # Held flat to the end of the run, so a run's last improvement stays visible.
                points.append((max(points[-1][0], float(row["seconds"])), points[-1][1]))
                ts, vs = zip(*points, strict=True)
                method = str(row["method"])
                ax.step(ts, vs, where="post", color=colours[method], alpha=0.8,
                        marker=".", markersize=4, label=method)
        ax.set_title(task)
        ax.set_xlabel("seconds")
        ax.set_ylabel(f"best valid {res.metric[task]}")
        ax.ticklabel_format(axis="y", useOffset=False)
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=7)
    for ax in list(axes.flat)[len(res.tasks):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_scores(rows: pd.DataFrame, res: Results, path: Path) -> None:
    """Per task: each run's test score (dots: folds and seeds) and each method's mean (bar)."""
    plt = _pyplot()
    cols = min(3, len(res.tasks))
    nrows = math.ceil(len(res.tasks) / cols)
    width = max(5.0, 0.7 * len(res.methods))
    fig, axes = plt.subplots(nrows, cols, figsize=(width * cols, 3.6 * nrows), squeeze=False)
    colours = [plt.get_cmap("tab10")(i % 10) for i in range(len(res.methods))]
    for ax, task in zip(axes.flat, res.tasks, strict=False):
        shown = [(i, m) for i, m in enumerate(res.methods) if (task, m) in res.tests]
        for i, method in shown:
            values = res.tests[(task, method)]
            ax.hlines(mean(values), i - 0.35, i + 0.35, color=colours[i], linewidth=2.5)
            ax.scatter([i] * len(values), values, color=colours[i], s=14, zorder=3)
        ax.set_xticks([i for i, _ in shown])
        ax.set_xticklabels([m for _, m in shown], rotation=30, fontsize=8)
        arrow = "higher" if res.maximize[task] else "lower"
        ax.set_title(task)
        ax.set_ylabel(f"test {res.metric[task]} ({arrow} is better)")
        ax.ticklabel_format(axis="y", useOffset=False)
    for ax in list(axes.flat)[len(res.tasks):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_relative(res: Results, path: Path) -> bool:
    """Bars: each method's mean test score relative to lgbm's, per task; False without lgbm."""
    rel = relative_table(res, res.table(mean))
    if not rel:
        return False
    plt = _pyplot()
    tasks = list(rel)
    methods = [m for m in res.methods if m != LGBM]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(tasks) * max(1, len(methods))), 3.6))
    width = 0.8 / max(1, len(methods))
    shown: list[float] = []
    for i, m in enumerate(methods):
        values = [100 * (rel[t].get(m) or 0.0) for t in tasks]
        ax.bar([j + i * width for j in range(len(tasks))], values, width, label=m)
        shown += values
    ax.axhline(0, color="black", linewidth=0.8)
    if max((abs(v) for v in shown), default=0.0) < 1.0:
        ax.set_ylim(-1.0, 1.0)  # differences below 1 % are not worth an axis of their own
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(tasks))])
    ax.set_xticklabels(tasks, rotation=20, fontsize=8)
    ax.set_ylabel("% better than LightGBM default (test)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
