"""Benchmark report: tables in Markdown plus PNG figures, from the runner's results Parquet.

    python -m benchmarks.report runs/bench/results.parquet -o benchmarks/report.md

The header states the fairness rule every method ran under. Per task and method: the test
score's mean ± sd over outer folds and seeds; under the sela protocol SELA's normalised score
(NS: F1 or weighted F1 as it is, 1/(1+RMSE) for RMSE); the test score relative to LightGBM with
default settings on the same split (NS is nearly flat for targets on a large scale); the average
rank of each method (ranked per task on the mean test score, ties averaged); wins / ties /
losses of every method against autogluon, optuna and sela (those present); each method's wall
time against its budget; figures of each run's test score per task, of the scores relative to
LightGBM and of the best valid score over time (the runs' node Parquet, or the baselines'
result.json). With the floor arm (`benchmarks.run --floor-arm`), the LLM gain per task: the
answer's test score with and without the LLM (mean over outer folds), their difference paired
by outer fold with its spread (with one fold: an interval over its test rows, benchmarks/gain.py),
what became of the LLM's feature programs, and on how many tasks the LLM won, lost or
tied within that spread; then each LLM run beside its floor run (scores, nodes, programs and
the executors' time on them, when the LLM was asked for no more). Only rows with status ok
count; failed ones are listed at the end.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.gain import Gain, llm_gains, run_interval
from benchmarks.program_arms import ARMS
from benchmarks.run import FLOOR
from benchmarks.stats import mean, rounded, same, sd
from benchmarks.table import whole
from common.errors import EngineError, UserError, error_exit
from common.metric import METRICS, normalised_score

REFERENCE = "sela"  # the default method others are counted against (wins / ties / losses)
# Every method is counted against each of these that ran: the peer a user would pick instead,
# the tuned LightGBM they would write, and SELA's policy.
REFERENCES = ("autogluon", "optuna", REFERENCE)
LGBM = "lgbm"
PROTOCOL_TEXT = {"sela": "SELA's metrics: F1 (binary), weighted F1 (multiclass), RMSE "
                         "(regression)",
                 "amlb": "AMLB's metrics: ROC AUC (binary), log loss (multiclass), RMSE "
                         "(regression)"}


# ---- arithmetic (pure, tested on hand-made numbers) ------------------------------------------


def relative_to(score: float, reference: float, maximize: bool) -> float | None:
    """How much better than `reference` a score is, as a fraction of it (+0.05 = 5 % better:
    higher for a maximised metric, lower for a minimised one); None for a zero reference."""
    if reference == 0:
        return None
    gain = score - reference if maximize else reference - score
    return gain / abs(reference)


Table = dict[str, dict[str, float]]  # task -> method -> value; a method without one is absent


def average_ranks(means: Table, maximize: dict[str, bool]) -> dict[str, tuple[float, int]]:
    """Rank the methods within each task on their mean test score (1 = best; methods that tie
    share the average of the ranks they span); per method, the mean rank over the tasks it has
    a score on, and that number of tasks."""
    ranks: dict[str, list[float]] = {}
    for task, scores in means.items():
        order = sorted(scores, key=lambda m: rounded(scores[m]), reverse=maximize[task])
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and same(scores[order[j + 1]], scores[order[i]]):
                j += 1
            for method in order[i:j + 1]:
                ranks.setdefault(method, []).append((i + j) / 2 + 1)
            i = j + 1
    return {m: (sum(r) / len(r), len(r)) for m, r in ranks.items()}


def wins_ties_losses(means: Table, maximize: dict[str, bool],
                     reference: str = REFERENCE) -> dict[str, tuple[int, int, int]]:
    """Per method: on how many tasks its mean test score beats, ties or trails `reference`'s
    (only tasks where both have one)."""
    out: dict[str, list[int]] = {}
    for task, scores in means.items():
        if reference not in scores:
            continue
        ref = scores[reference]
        for method, score in scores.items():
            if method == reference:
                continue
            counts = out.setdefault(method, [0, 0, 0])
            if same(score, ref):
                counts[1] += 1
            elif (score > ref) == maximize[task]:
                counts[0] += 1
            else:
                counts[2] += 1
    return {m: (c[0], c[1], c[2]) for m, c in out.items()}


def best_so_far(points: list[tuple[float, float]], maximize: bool) -> list[tuple[float, float]]:
    """(seconds, best valid score up to then), from (seconds, valid score) in any order."""
    out: list[tuple[float, float]] = []
    for t, value in sorted(points):
        if not out or (value > out[-1][1] if maximize else value < out[-1][1]):
            out.append((t, value))
        else:
            out.append((t, out[-1][1]))
    return out


# ---- tables ----------------------------------------------------------------------------------


@dataclass
class Results:
    """The finished runs, grouped: test scores per (task, method), in the order they appear."""

    tasks: list[str]
    methods: list[str]  # policies first, then baselines
    metric: dict[str, str]
    maximize: dict[str, bool]
    tests: dict[tuple[str, str], list[float]]  # over folds and seeds
    budget: float  # of the searches (0 without any)
    baseline_budget: float  # of the baselines (0 without any)

    @classmethod
    def of(cls, rows: pd.DataFrame) -> Results:
        tasks: list[str] = []
        policies: list[str] = []
        baselines: list[str] = []
        metric: dict[str, str] = {}
        tests: dict[tuple[str, str], list[float]] = {}
        budgets = {"policy": 0.0, "baseline": 0.0}
        for row in rows.to_dict("records"):
            task, method = str(row["task"]), str(row["method"])
            if task not in tasks:
                tasks.append(task)
            kind = policies if row["kind"] == "policy" else baselines
            if method not in kind:
                kind.append(method)
            metric[task] = str(row["metric"])
            tests.setdefault((task, method), []).append(float(row["test"]))
            budgets[str(row["kind"])] = max(budgets[str(row["kind"])], float(row["budget"]))
        maximize = {t: METRICS[m].maximize if m in METRICS else True for t, m in metric.items()}
        return cls(tasks, policies + baselines, metric, maximize, tests, budgets["policy"],
                   budgets["baseline"])

    def table(self, how: Callable[[list[float]], float]) -> Table:
        out: Table = {}
        for task in self.tasks:
            out[task] = {m: how(self.tests[(task, m)]) for m in self.methods
                         if (task, m) in self.tests}
        return out


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}g}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f} %"


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in body)]


def relative_table(res: Results, means: Table) -> dict[str, dict[str, float | None]]:
    return {t: {m: relative_to(v, means[t][LGBM], res.maximize[t]) for m, v in means[t].items()}
            for t in res.tasks if LGBM in means[t]}


def _suite(rows: pd.DataFrame, column: str, default: Any) -> list[str]:
    """The distinct values of a suite-wide column (rows written before it existed: `default`)."""
    values = rows[column] if column in rows else pd.Series([default] * len(rows))
    return sorted({str(default if pd.isna(v) else v) for v in values})


def fairness(rows: pd.DataFrame, res: Results, source: str) -> list[str]:
    """The header: what the rows are and the one rule every method ran under."""
    protocols = _suite(rows, "protocol", "sela")
    folds = _suite(rows, "outer_folds", 1)
    cores = _suite(rows, "cores", "?")
    seeds = sorted({int(s) for s in rows.seed})
    budgets = []
    if res.budget:
        budgets.append(f"{res.budget:g} s per search")
    if res.baseline_budget:
        budgets.append(f"{res.baseline_budget:g} s per baseline")
    split = ("the engine's own split (test 20 %)" if folds == ["1"] else
             f"{', '.join(folds)} outer folds (each fold's rows once the test split)")
    return [
        f"From `{source}`: {len(res.tasks)} tasks, "
        f"methods {', '.join(res.methods)}, seeds {', '.join(map(str, seeds))}; protocol "
        f"{', '.join(protocols)} ({'; '.join(PROTOCOL_TEXT.get(p, p) for p in protocols)}); "
        f"{split}.", "",
        "**Fairness rule.** Every method learns from the same rows, everything but the test "
        "split (the engine's train + valid: a search learns from and scores its candidates on "
        "them as its `--folds` says, every baseline fits on all of them), within the same "
        "wall-clock budget ("
        f"{', '.join(budgets)}), on all the machine's cores ({', '.join(cores)}); every test "
        "score comes from one scorer (`engine.evaluation.scoring`) on test labels no "
        "method saw. Searches and `lgbm`/`optuna` see the features of the harness's "
        "`prepare()`; `autogluon` and `flaml` the raw columns, as a user hands them over. "
        "Seconds are measured wall time (a baseline: fit, predict and score): a library that "
        "overruns its budget shows it under Wall time.", "",
    ]


def render(rows: pd.DataFrame, failed: pd.DataFrame, figures: dict[str, str],
           source: str) -> str:
    res = Results.of(rows)
    methods, tasks = res.methods, res.tasks
    means, sds = res.table(mean), res.table(sd)
    counts = res.table(lambda v: float(len(v)))
    lines = ["# Benchmark report", "", *fairness(rows, res, source),
             "## Test score per task (mean ± sd over folds and seeds)", ""]
    body = []
    for task in tasks:
        arrow = "higher" if res.maximize[task] else "lower"
        cells = [f"{means[task][m]:.4g} ± {sds[task][m]:.2g} ({int(counts[task][m])})"
                 if m in means[task] else "n/a" for m in methods]
        body.append([task, f"{res.metric[task]} ({arrow} is better)", *cells])
    lines += _table(["task", "metric", *methods], body)
    lines += ["", "(n) = runs with a result (folds × seeds).", ""]
    if _suite(rows, "protocol", "sela") == ["sela"]:
        ns = {t: {m: mean([normalised_score(v, res.maximize[t]) for v in res.tests[(t, m)]])
                  for m in means[t]} for t in tasks}
        lines += ["## SELA normalised score (NS, test)", "",
                  "NS = F1 / weighted F1 as it is, 1/(1+RMSE) for RMSE; the mean over runs of "
                  "each run's NS. Higher is better.", ""]
        body = [[t, *(_fmt(ns[t].get(m)) for m in methods)] for t in tasks]
        body.append(["**mean**", *(_fmt(_mean_of([ns[t][m] for t in tasks if m in ns[t]]))
                                   for m in methods)])
        lines += _table(["task", *methods], body)
        lines.append("")
    lines += ["## Test score relative to LightGBM with default settings", ""]
    rel = relative_table(res, means)
    if rel:
        lines += ["Mean test score against the `lgbm` baseline's on the same splits: +5 % = 5 % "
                  "better (higher F1 or AUC, lower RMSE or log loss).", ""]
        body = [[t, *(_pct(rel[t].get(m)) for m in methods)] for t in rel]
        body.append(["**mean**", *(_pct(_mean_of([v for r in rel.values()
                                                  if (v := r.get(m)) is not None]))
                                   for m in methods)])
        lines += _table(["task", *methods], body)
    else:
        lines.append("No `lgbm` baseline in these results: run with `--baselines lgbm`.")
    ranks = average_ranks(means, res.maximize)
    lines += ["", "## Average rank", "",
              "Per task the methods are ranked on their mean test score (1 = best, ties share "
              "the average rank); the mean over tasks.", ""]
    lines += _table(["method", "average rank", "tasks"],
                    [[m, f"{ranks[m][0]:.2f}", str(ranks[m][1])]
                     for m in sorted(methods, key=lambda m: ranks[m][0])])
    for reference in REFERENCES:
        if reference == REFERENCE and reference not in methods:
            continue  # sela is counted against only when it ran; the peers are always asked for
        lines += ["", f"## Wins / ties / losses against {reference}", ""]
        if reference in methods:
            wtl = wins_ties_losses(means, res.maximize, reference)
            lines += [f"Tasks on which a method's mean test score beats, ties or trails "
                      f"{reference}'s.", ""]
            lines += _table(["method", "wins", "ties", "losses"],
                            [[m, *map(str, wtl[m])] for m in methods if m in wtl])
        else:
            lines.append(f"No `{reference}` runs in these results: run with "
                         f"`--baselines ...,{reference}`.")
    lines += gain_section(rows, res)
    lines += ["", "## Wall time", "",
              "Measured seconds per run (a search: the engine's own count; a baseline: fit, "
              "predict and score) against the budget it was given.", ""]
    lines += _table(["method", "runs", "mean s", "max s", "budget s", "most over budget s"],
                    wall_time(rows, res.methods))
    lines += ["", "## Figures", ""]
    lines += [f"![{title}]({name})" for title, name in figures.items()]
    lines += ["", "## Runs", "",
              "valid: a search's best valid score; a baseline's own estimate (optuna: 5-fold "
              "CV; autogluon, flaml: their internal validation; lgbm: none).", ""]
    body = [[str(r["task"]), str(whole(r.get("fold"))), str(r["method"]), str(r["seed"]),
             _fmt(_float(r["valid"])), _fmt(float(r["test"])),
             f"{int(r['nodes'])} ({int(r['ok_nodes'])})",
             str(int(r["prompt_tokens"]) + int(r["completion_tokens"])),
             f"{float(r['seconds']):.0f}", str(r["best_operator"]), f"`{r['run_dir']}`"]
            for r in rows.assign(fold=rows.fold.fillna(0) if "fold" in rows else 0)
            .sort_values(["task", "fold", "method", "seed"]).to_dict("records")]
    lines += _table(["task", "fold", "method", "seed", "valid", "test", "nodes (ok)", "tokens",
                     "seconds", "best by", "run"], body)
    if len(failed):
        lines += ["", "## Failed runs", ""]
        lines += _table(["task", "fold", "method", "seed", "error"],
                        [[str(r["task"]), str(whole(r.get("fold"))), str(r["method"]),
                          str(r["seed"]), str(r["error"]).replace("|", "/")[:200]]
                         for r in failed.to_dict("records")])
    return "\n".join(lines) + "\n"


# Paired runs that started further apart than this may have run at another pace (`gain.Gain`).
PAIRED_HOURS = 1.0

PROGRAM_COLUMNS = ("programs_proposed", "programs_rejected", "programs_failed",
                   "programs_scored", "programs_kept")


def gain_section(rows: pd.DataFrame, res: Results) -> list[str]:
    """The LLM-gain table and its tally; nothing without the floor arm."""
    gains = llm_gains(rows, res.maximize, run_interval)
    if not gains:
        return []
    lines = ["", "## LLM gain: the same search with and without the LLM", "",
             f"`{FLOOR}` is the same engine search with `--llm none`: no LLM started, the "
             "floor alone (baseline root, portfolio, Optuna trials, ensembles). Scores are the "
             "answer's test score, the mean over outer folds (each fold: the mean over seeds); "
             "the difference is paired by fold and signed so that above zero the LLM did "
             "better, ± its sd over folds. A difference within that spread is a tie. With one "
             "outer fold, the 95 % paired bootstrap interval of the gain over the test rows "
             "decides instead (each fold's first seed; n/a without the run folders): a tie when "
             "it holds zero. It knows the test rows' noise, not the search's. Programs: the "
             "LLM's feature programs over all runs, proposed / refused by the checks / failed / "
             "scored / kept. A program not kept is still a scored model that ensemble "
             "selection may pick: the answer's weight on such programs is given apart. The LLM "
             "is asked for no more once its programs stop paying (`--llm-patience`, or a "
             "record no better than coin tosses): in how many runs, and when. With "
             "several seeds, the floor's own sd over its seeds on a fold is the search's noise: "
             "how far a second run of the same search without an LLM moves.", ""]
    body = []
    for gain in gains:
        runs = rows[(rows.task == gain.task) & (rows.method == gain.method)]
        counts = " / ".join(str(int(runs[c].fillna(0).sum())) if c in runs else "n/a"
                            for c in PROGRAM_COLUMNS)
        seconds = (runs.program_llm_seconds.dropna().astype(float)
                   if "program_llm_seconds" in runs else pd.Series(dtype=float))
        uses = (f"{int(runs.answer_uses_program.fillna(False).astype(bool).sum())} of {len(runs)}"
                if "answer_uses_program" in runs else "n/a")
        shares = runs.answer_unkept_share.dropna().astype(float) \
            if "answer_unkept_share" in runs else pd.Series(dtype=float)
        unkept = f"{shares.mean():.0%} ({len(shares)})" if len(shares) else "n/a"
        # rows written before these columns have no reason, not even "": not known
        known = runs[runs.llm_retired_why.notna()] if "llm_retired_why" in runs else runs[:0]
        retired = known.llm_retired_seconds.dropna().astype(float)
        asked_off = "n/a" if known.empty else f"{len(retired)} of {len(known)}" + (
            f" (median {retired.median():.0f} s)" if len(retired) else "")
        intervals = "; ".join("n/a" if i is None else f"[{i[0]:+.3g}, {i[1]:+.3g}]"
                              for i in gain.intervals)
        body.append([gain.task, res.metric[gain.task], gain.method, _fmt(gain.with_llm),
                     _fmt(gain.without),
                     f"{gain.mean:+.4g} ± {gain.spread:.2g} ({len(gain.differences)})",
                     intervals, gain.verdict, counts,
                     _fmt(float(seconds.median())) if len(seconds) else "n/a", uses, unkept,
                     asked_off,
                     "n/a" if gain.hours_apart is None else f"{gain.hours_apart:.1f}",
                     "n/a" if gain.floor_spread is None else f"{gain.floor_spread:.2g}"])
    lines += _table(["task", "metric", "method", "with LLM", FLOOR, "LLM − floor",
                     "95 % interval over test rows (per fold)", "verdict", "programs",
                     "median LLM s per program", "answer uses a kept program (runs)",
                     "answer's weight on programs not kept (mean, runs)",
                     "LLM asked for no more (runs)",
                     "hours between paired runs (most)",
                     f"{FLOOR}'s sd over seeds (mean over folds)"], body)
    lines.append("")
    apart = [g for g in gains if g.hours_apart is not None and g.hours_apart > PAIRED_HOURS]
    if apart:
        lines.append(f"- **Paired runs started up to {max(g.hours_apart or 0 for g in apart):.0f}"
                     f" hours apart** ({', '.join(dict.fromkeys(g.task for g in apart))}): a "
                     "machine's pace changes from day to day, so these differences may be the "
                     "day's and not the LLM's. One `benchmarks.run --floor-arm` call runs each "
                     "floor run right after the LLM run it is paired with.")
    for method in dict.fromkeys(g.method for g in gains):
        verdicts = [g.verdict for g in gains if g.method == method]
        unknown = verdicts.count("one fold")
        lines.append(f"- with the LLM, {method} won on {verdicts.count('won')} of "
                     f"{len(verdicts)} tasks, lost on {verdicts.count('lost')} and tied on "
                     f"{verdicts.count('tied')} within the folds' spread (one fold: the "
                     "interval over its test rows)"
                     + (f"; on {unknown} one fold and no interval tell nothing." if unknown
                        else "."))
    return lines + ceiling_section(gains) + runs_section(rows, res)


def ceiling_share(llm: Gain, expert: Gain) -> float | None:
    """The LLM's gain over the floor as a share of the expert arm's, None unless the expert
    arm is ahead of the floor by the mean."""
    return llm.mean / expert.mean if expert.mean > 0 else None


def ceiling_section(gains: list[Gain]) -> list[str]:
    """Per task, each LLM search's gain read against the expert arm's (the ceiling a gate that
    keeps good programs allows); nothing without the expert arm."""
    experts = {g.task: g for g in gains if g.method == "expert"}
    llms = [g for g in gains if g.method not in ARMS and g.task in experts]
    if not llms:
        return []
    lines = ["", "### The LLM's gain against the ceiling", "",
             "The expert arm is the same search fed hand-written programs known to help "
             "(`benchmarks/program_arms.py`). Share: (LLM − floor) / (expert − floor), the "
             "means over folds, where the expert arm is ahead of the floor; ± the sd over folds "
             "of each difference.", ""]
    body = []
    for llm in llms:
        expert = experts[llm.task]
        share = ceiling_share(llm, expert)
        body.append([llm.task, llm.method, _fmt(llm.without), _fmt(llm.with_llm),
                     _fmt(expert.with_llm), f"{llm.mean:+.4g} ± {llm.spread:.2g}",
                     f"{expert.mean:+.4g} ± {expert.spread:.2g}",
                     "n/a (expert not ahead)" if share is None else f"{share:.0%}"])
    return lines + _table(["task", "method", FLOOR, "with LLM", "expert", "LLM − floor",
                           "expert − floor", "share of the ceiling"], body)


def runs_section(rows: pd.DataFrame, res: Results) -> list[str]:
    """Each LLM run beside the floor run of its task, fold and seed (or the fold's first
    floor seed): their test scores and nodes, and what became of the LLM's programs."""
    policy = rows[rows.kind == "policy"].to_dict("records")
    floors: dict[tuple[str, int], dict[int, Mapping[Any, Any]]] = {}
    for row in policy:
        if row["method"] == FLOOR:
            floors.setdefault((str(row["task"]), whole(row.get("fold"))), {})[
                whole(row.get("seed"))] = row
    body = []
    for llm in sorted((r for r in policy if r["method"] != FLOOR),
                      key=lambda r: (str(r["method"]), whole(r.get("fold")), str(r["task"]),
                                     whole(r.get("seed")))):
        task, fold, seed = str(llm["task"]), whole(llm.get("fold")), whole(llm.get("seed"))
        seeds = floors.get((task, fold))
        if not seeds:
            continue
        floor = seeds.get(seed, seeds[min(seeds)])
        sign = 1.0 if res.maximize[task] else -1.0
        counts = " / ".join(_whole_or_na(llm.get(c)) for c in PROGRAM_COLUMNS)
        share = _ratio(llm.get("program_exec_seconds"), llm.get("exec_seconds"))
        retired = _float(llm.get("llm_retired_seconds"))
        why = llm.get("llm_retired_why")
        median = _float(llm.get("program_llm_seconds"))
        body.append([
            task, str(fold), str(llm["method"]), str(seed), _fmt(float(floor["test"]), 5),
            _fmt(float(llm["test"]), 5),
            f"{sign * (float(llm['test']) - float(floor['test'])):+.4g}",
            f"{_whole_or_na(floor.get('nodes'))} / {_whole_or_na(llm.get('nodes'))}", counts,
            "n/a" if share is None else f"{share:.0%}",
            _yes_no(llm.get("answer_uses_program")),
            "n/a" if why is None or pd.isna(why) else
            ("never" if retired is None else f"{retired:.0f} ({why})"),
            "n/a" if median is None else f"{median:.1f}",
            f"{_started(floor)} / {_started(llm)}"])
    if not body:
        return []
    return ["", "### Each run", "",
            "Signed so that above zero the LLM did better. Nodes: the floor run's / the LLM "
            "run's. Programs: proposed / refused by the checks / failed / scored / kept. The "
            "executors' seconds on the programs' runs, as a share of all their seconds.", "",
            *_table(["task", "fold", "method", "seed", FLOOR, "with LLM", "LLM − floor",
                     "nodes", "programs", "executors' time on programs",
                     "answer uses a kept program", "LLM asked for no more at s (why)",
                     "median LLM s per program", "started (UTC, floor / LLM)"], body)]


def _yes_no(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else ("yes" if value else "no")


def _whole_or_na(value: Any) -> str:
    number = _float(value)
    return "n/a" if number is None else str(int(number))


def _ratio(part: Any, whole_: Any) -> float | None:
    part, total = _float(part), _float(whole_)
    return None if part is None or not total else part / total


def _started(row: Mapping[Any, Any]) -> str:
    at = _float(row.get("started_at"))
    return "n/a" if not at else pd.Timestamp(at, unit="s").strftime("%m-%d %H:%M")


def wall_time(rows: pd.DataFrame, methods: list[str]) -> list[list[str]]:
    """Per method: runs, mean and max seconds, the budget, and the largest overrun (0: none)."""
    body = []
    for method in methods:
        part = rows[rows.method == method]
        seconds, budget = part.seconds.astype(float), part.budget.astype(float)
        over = max(0.0, float((seconds - budget).max()))
        body.append([method, str(len(part)), f"{seconds.mean():.0f}", f"{seconds.max():.0f}",
                     "/".join(f"{b:g}" for b in sorted(set(budget))), f"{over:.0f}"])
    return body


def _float(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _mean_of(values: list[float]) -> float | None:
    return mean(values) if values else None


def write_report(results: Path, out: Path) -> Path:
    frame = pd.read_parquet(results)
    rows = frame[(frame.status == "ok") & frame.test.notna()].copy()
    failed = frame[frame.status != "ok"]
    if rows.empty:
        raise UserError(f"{results} has no finished runs to report")
    res = Results.of(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    from benchmarks.figures import write_figures  # matplotlib, and figures import this module

    out.write_text(render(rows, failed, write_figures(rows, res, out), str(results)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="results.parquet written by benchmarks.run")
    parser.add_argument("-o", "--out", type=Path, default=Path("benchmarks/report.md"),
                        help="the Markdown report; PNGs go beside it (default benchmarks/"
                             "report.md)")
    args = parser.parse_args(argv)
    if not args.results.is_file():
        print(f"error: {args.results} not found; run python -m benchmarks.run first",
              file=sys.stderr)
        return 2
    try:
        path = write_report(args.results, args.out)
    except EngineError as exc:
        return error_exit(exc)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
