"""What a run leaves for a person: `summary.md`, one screen, readable without our code.

The facts are gathered here once and rendered twice: as Markdown into `summary.md` and, by
`engine.show`, as rich tables in the terminal.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actors.llm import NO_LLM
from engine.evaluation.selection import Selection
from engine.task.prepare import PreparedTask
from operators.analyst import analysis_findings
from operators.flags import READS_OUTSIDE_INPUT, outside_reads
from operators.harness import model_part
from operators.kinds.ensemble import member_weights
from operators.retrieval import as_stored, replaced_model
from search.families import BASELINE_FAMILY
from search.journal import Journal
from search.node import Node, Operator
from search.policy import Proposal
from search.programs import answer_programs, gate_of, kept_programs, program_counts

# Rows of the best path shown before eliding the middle: the summary must stay one screen even
# after a long chain of improvements.
MAX_PATH_ROWS = 12
TOP_ERRORS = 3
MAX_LISTED = 15  # excluded or flagged nodes listed in summary.md; the rest are counted

# Where a run's files are, in the order a person wants them.
FILES: tuple[tuple[str, str], ...] = (
    ("best/solution.py", "the best solution; runs on its own next to an input/ folder"),
    ("best/submission/", "its valid and test predictions"),
    ("best/model/", "its fitted models, for engine.predict (loaded only inside the sandbox)"),
    ("good/", "the top distinct working solutions, best first"),
    ("tree.html", "the search tree: open it in a browser, click a node"),
    ("plots/", "best score over time, nodes by status, worker timeline"),
    ("nodes/*.parquet", "every node (pandas.read_parquet('nodes'))"),
    ("manifest.json", "configuration, data hash, budget spent"),
)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.5g}"


def best_path(journal: Journal) -> list[dict[str, Any]]:
    best = journal.final()
    if best is None:
        return []
    return [
        {"node_id": n.node_id, "operator": n.operator.value, "status": n.status.value,
         "metric_raw": n.metric_raw}
        for n in journal.ancestors(best.node_id)
    ]


def shown_path(journal: Journal) -> list[tuple[str, dict[str, Any] | None]]:
    """The best path as (step number, row) pairs, its middle elided (row None) when long."""
    path = [(str(i), row) for i, row in enumerate(best_path(journal))]
    if len(path) <= MAX_PATH_ROWS:
        return list(path)
    head, tail = 3, MAX_PATH_ROWS - 4
    return [*path[:head], ("...", None), *path[-tail:]]


def top_errors(journal: Journal, n: int = TOP_ERRORS) -> list[tuple[str, int]]:
    """The most common kinds of failure: the error's text before its first colon (node ids
    are dropped, so every duplicate-code node counts as one kind)."""
    return Counter(
        re.sub(r"\b[0-9a-f]{12}\b", "<node>", node.error.split(":")[0])[:60]
        for node in journal if node.is_buggy and node.error
    ).most_common(n)


Span = tuple[float, float, str]  # (start time, seconds, node status)


def worker_spans(journal: Journal) -> dict[tuple[str, str], list[Span]]:
    """What each worker did, as the run's own timeline: ("llm", actor) -> the generation time
    of each node it served (from the node's creation), ("exec", executor) -> each sandbox run
    (every fold's run of a node on the executor that ran it)."""
    spans: dict[tuple[str, str], list[Span]] = {}
    for node in journal:
        if node.llm_actor and node.llm_seconds > 0:
            spans.setdefault(("llm", node.llm_actor), []).append(
                (node.created_at, node.llm_seconds, node.status.value))
        if node.runs:
            for _fold, executor, started, seconds in json.loads(node.runs):
                if executor:
                    spans.setdefault(("exec", executor), []).append(
                        (float(started), float(seconds), node.status.value))
        elif node.executor and node.exec_seconds > 0:  # a node stored before `runs`
            spans.setdefault(("exec", node.executor), []).append(
                (node.finished_at - node.exec_seconds, node.exec_seconds, node.status.value))
    return spans


def busy_shares(journal: Journal) -> dict[str, float]:
    """Each worker's share of the run's wall time spent working (first node's creation to
    the last node's end), LLM actors first."""
    nodes = [n for n in journal if n.finished_at]
    if not nodes:
        return {}
    start = min(n.created_at or n.finished_at for n in nodes)
    wall = max(n.finished_at for n in nodes) - start
    spans = worker_spans(journal)
    return {worker: min(1.0, sum(s for _, s, _ in bars) / wall) if wall > 0 else 0.0
            for (_, worker), bars in sorted(spans.items(), key=lambda w: (w[0][0] != "llm",
                                                                          w[0][1]))}


def summary_facts(journal: Journal, tests: dict[str, float | None], spent: dict[str, Any],
                  selection: Selection | None = None) -> dict[str, Any]:
    """The run's facts for the manifest's `result` and the summary; a holdout answer's test
    score is its refit's (what best/ ships), when `selection` has one."""
    best = journal.final()
    drafts = [n for n in journal.draft_nodes if n.code]
    ran = [n for n in drafts if n.exec_seconds > 0 or n.is_ok]
    refit = selection.refit_test_raw if selection is not None else None
    return {
        "best_node": best.node_id if best else None,
        "best_valid": best.metric_raw if best else None,
        "best_test": refit if refit is not None else tests.get(best.node_id) if best else None,
        **({"refit": (selection.refit.rows if selection and selection.refit else None)
            or True} if refit is not None else {}),
        "best_operator": best.operator.value if best else None,
        "status_counts": journal.status_counts(),
        "drafts_ok_without_debug": sum(n.is_ok for n in drafts),
        "drafts_run": len(ran),
        "excluded_by_constraints": len(journal.excluded_nodes),
        "flagged": sum(bool(n.flags) for n in journal),
        "busy": busy_shares(journal),
        **spent,
    }


def cost(node: Node) -> str:
    """What the harness measured about a node, in words ('n/a' where it measured nothing)."""
    def show(value: float | None, unit: str) -> str:
        return "n/a" if value is None else f"{value:.3g} {unit}"
    return (f"trains in {show(node.train_seconds, 's')}, predicts in "
            f"{show(node.predict_ms_per_row, 'ms per row')}, model {show(node.model_mb, 'MB')}")


def _closing(facts: dict[str, Any]) -> str:
    """The last start's work after its search, against the seconds the search left for it."""
    if "closing_seconds" not in facts:  # a run stored before the search kept time for it
        return ""
    resumed = facts.get("resumed_seconds") or 0.0
    return (f"; selecting and saving the answer took {facts['closing_seconds']:.0f}s of it "
            f"({facts.get('reserved_seconds', 0.0):.0f}s kept for that)"
            + (f"; the search went on {resumed:.0f}s once the answer's one-row time was "
               "measured and it needed less" if resumed else ""))


def overview(journal: Journal, facts: dict[str, Any], *, target: str, task_type: str,
             metric: str, maximize: bool,
             selection: Selection | None = None) -> list[tuple[str, str]]:
    """The headline facts of a run as (label, value) pairs, shared by summary.md and show. The
    answer is the final selection's node (what best/ holds), which need not be the best valid."""
    best = journal.final()
    direction = "higher" if maximize else "lower"
    counts = ", ".join(f"{k} {v}" for k, v in journal.status_counts().items() if v)
    prompt, completion = facts.get("prompt_tokens", 0), facts.get("completion_tokens", 0)
    stopped = f"; stopped by {facts['stopped_by']}" if facts.get("stopped_by") else ""
    tokens = (f"{prompt + completion} ({prompt} prompt, {completion} completion), "
              f"LLM {facts.get('llm_seconds', 0.0):.0f}s")
    return [
        ("task", f"predict `{target}` ({task_type}), metric {metric} ({direction} is better)"),
        *([("isolation", f"{facts['isolation']}, not bubblewrap: candidate scripts could read "
                         "the hidden labels (accepted with --weak-isolation)")]
          if facts.get("isolation") not in (None, "", "bwrap") else []),
        (f"answer's valid {metric}",
         _fmt(facts.get("best_valid"))
         + (f" (node {best.node_id}, {best.operator.value}{_cross_fitted(selection)})" if best else
            f" (no eligible node: {len(journal.excluded_nodes)} ok nodes break the constraints)"
            if journal.excluded_nodes else " (no working node)")),
        (f"its test {metric}", _fmt(facts.get("best_test"))
         + (" (refitted on train + valid; " if facts.get("refit") is True else
            f" (refitted on {facts['refit']} train + valid rows, what the budget afforded; "
            if facts.get("refit") else _on_tested(facts))
         + "reported only, never searched)"),
        # the answer's own rows stay together, so 'its' never reads as the unchosen best's
        *([("its cost", cost(best) + (f"; {selection.latency.text()}"
                                      if selection and selection.latency else ""))]
          if best else []),
        *([(f"best valid {metric}", f"{_fmt(top.metric_raw)} (node {top.node_id}, "
            f"{top.operator.value}): not the answer, see Final selection")]
          if best and (top := journal.best()) and top is not best else []),
        *([("constraints", "; ".join(journal.constraints.describe())
            + f" ({facts.get('excluded_by_constraints', 0)} ok nodes excluded)")]
          if journal.constraints else []),
        *([("valid scores", f"out of fold: {facts['folds']}-fold cross-validation of train + "
                            "valid" if facts["folds"] > 1 else _holdout(facts))]
          if facts.get("folds") else []),
        ("nodes", f"{len(journal)} ({counts or 'none'}); "
                  + ", ".join(f"{op} {n}" for op, n in Counter(
                      node.operator.value for node in journal).most_common())),
        *([("best valid by model family", families)] if (families := _families(journal)) else []),
        ("drafts that ran without a debug step",
         f"{facts.get('drafts_ok_without_debug', 0)} of {facts.get('drafts_run', 0)}"),
        # one line for the LLM and what it used, so the summary stays one screen
        (("LLM", f"{_llm_text(facts['llm'])}; tokens {tokens}") if facts.get("llm")
         else ("tokens", tokens)),
        ("time", f"{facts.get('seconds', 0.0):.0f}s of a {facts.get('budget', 0.0):.0f}s "
                 f"budget{stopped}{_closing(facts)}"),
        *([("workers busy", ", ".join(f"{w} {share:.0%}" for w, share in facts["busy"].items()))]
          if facts.get("busy") else []),
        *([("peak memory", _peak_memory(facts))] if facts.get("peak_driver_bytes") else []),
    ]


def family_bests(journal: Journal) -> list[tuple[str, Node, int]]:
    """Each model family the engine's configurations ran (baseline, portfolio, Optuna trials):
    its best ok node by valid score and its ok nodes, the best family first."""
    best: dict[str, tuple[float, Node, int]] = {}
    for node in journal:
        traits = node.operator.traits
        if not (node.is_ok and traits.configured and traits.engine_written):
            continue
        family = Proposal.of(node).family or (
            BASELINE_FAMILY if node.operator is Operator.BASELINE else "")
        if not family or node.metric is None:
            continue
        score, top, count = best.get(family, (node.metric, node, 0))
        if node.metric > score:
            score, top = node.metric, node
        best[family] = (score, top, count + 1)
    return [(family, top, count) for family, (_, top, count) in
            sorted(best.items(), key=lambda entry: -entry[1][0])]


def _families(journal: Journal) -> str:
    return ", ".join(f"{family} {_fmt(top.metric_raw)} (node {top.node_id}, {count} ok)"
                     for family, top, count in family_bests(journal))


def _on_tested(facts: Mapping[str, Any]) -> str:
    """Where an answer that was not refitted was scored: the search's sample of the test rows,
    when it predicted one."""
    sample = facts.get("sample") or {}
    if sample.get("tested", sample.get("test")) == sample.get("test"):
        return " ("
    return f" (on the search's {sample['tested']} of {sample['test']} test rows; "


def _holdout(facts: Mapping[str, Any]) -> str:
    sample = facts.get("sample")
    if not sample:
        return "the holdout: learn from train, score on valid"
    tested = sample.get("tested", sample.get("test"))
    test = (f"; its nodes' test scores on {tested} of {sample['test']} test rows"
            if tested != sample.get("test") else "")
    return (f"the holdout on a sample: learn from {sample['learn']} of {sample['train']} train "
            f"rows, score on {sample['held_out']} of {sample['valid']} valid rows{test} (the "
            "answer is refitted on as many train + valid rows as the budget affords, and "
            "scored on every test row)")


def _peak_memory(facts: Mapping[str, Any]) -> str:
    """The driver's resident peak and the largest candidate's, each its own process's."""
    candidate = facts.get("peak_candidate_bytes")
    return (f"driver {facts['peak_driver_bytes'] / 2**30:.2f} GiB"
            + (f", largest candidate {candidate / 2**30:.2f} GiB" if candidate else "")
            + " (resident)")


def _llm_text(llm: str) -> str:
    """The run's `--llm`, in words where it is none."""
    if llm == NO_LLM:
        return "none: the engine's floor alone (no LLM started, no prompt written)"
    return f"`{llm}`"


def _cross_fitted(selection: Selection | None) -> str:
    """An ensemble answer's valid score scored the weights it chose: its honest twin."""
    cross = selection.cross_fitted_raw if selection is not None else None
    if cross is None:
        return ""
    return (f"; its weights were selected on these same rows: cross-fitted, each fold "
            f"blended with weights selected on the other folds, {_fmt(cross)}")


def analysis_section(journal: Journal) -> list[str]:
    """--analyst: what the exploration found (the text every later prompt carried), or why
    the search went on without findings."""
    tries = journal.nodes_of(Operator.ANALYZE)
    if not tries:
        return []
    findings = analysis_findings(journal)
    if findings:
        return ["## Data analysis (in every later prompt)", "", "```", findings, "```", ""]
    last = tries[-1].error or tries[-1].status.value
    return ["## Data analysis", "",
            f"- failed {len(tries)}x (last: {last}); the search went on without findings", ""]


def programs_section(journal: Journal, facts: Mapping[str, Any]) -> list[str]:
    """The LLM's feature programs: what became of them, when the LLM was asked for no more,
    each kept one's added columns, mean gain and tally, and whether the answer trains on one;
    nothing when none was proposed."""
    programs = journal.nodes_of(Operator.FEATURES)
    if not programs:
        return []
    counts = program_counts(programs)
    median = counts.median_llm_seconds
    lines = ["## Feature programs", "",
             f"- {counts.proposed} proposed: {counts.rejected} refused by the checks, "
             f"{counts.failed} failed, {counts.scored} scored, {counts.kept} kept; median LLM "
             f"seconds per program {'n/a' if median is None else f'{median:.1f}'}"]
    if facts.get("llm_retired_seconds") is not None:
        lines.append(f"- the LLM was asked for no more at {facts['llm_retired_seconds']:.0f}s "
                     f"({facts.get('llm_retired_why', '')}); its CPUs ran the floor's trials "
                     "from then on")
    answer = journal.final()
    if answer is not None:
        used = answer_programs(journal, member_weights(answer))
        line = (f"- the answer ({answer.node_id}, {answer.operator.value}) "
                + (f"uses kept program {', '.join(used.kept)}" if used.kept
                   else "uses no kept program"))
        if used.not_kept:  # ensemble selection picked a program's own node, not kept
            line += (f"; {used.not_kept_share:.0%} of its weight is on programs that were "
                     f"not kept ({', '.join(used.not_kept)})")
        lines.append(line)
    gates = [(node, gate) for node in kept_programs(journal)
             if (gate := gate_of(node)) is not None]
    if gates:
        lines += ["", "Gains are in the normalised metric (higher is better), with the program "
                  "minus without it, on the same held-out rows.", "",
                  "| kept program | columns added | mean gain | tally |", "|---|---|---|---|"]
        lines += [f"| {node.node_id} | {', '.join(gate.added) or 'n/a'} | "
                  f"{gate.mean_gain:+.4g} | {gate.reason} |" for node, gate in gates]
    return [*lines, ""]


def memory_section(journal: Journal, record: dict[str, Any], metric: str) -> list[str]:
    """--memory: the cases retrieved, how each did run as stored and in the recall draft that
    adapted it (and whether that reply dropped the case's model), and what the run added."""
    if not record or record.get("store") in (None, "off"):
        return []
    lines = ["## Memory", "", f"- store: `{record['store']}`; {record.get('fixes', 0)} "
             "remembered fixes (debug steps are shown the nearest one)"]
    stored = {n.hint: n for n in journal if as_stored(n)}
    recalls = {n.hint: n for n in journal.nodes_of(Operator.RECALL)}

    def outcome(kind: str, node: Node | None) -> str:
        if node is None:
            return f"{kind} not run"
        if not node.is_ok:
            return f"{kind} {node.node_id} {node.status.value}: {node.error[:80]}"
        beat = " (beats the baseline)" if journal.beats_baseline(node) else ""
        return f"{kind} {node.node_id} ok, valid {metric} {_fmt(node.metric_raw)}{beat}"

    for case in record.get("cases", []):
        case_node, recall = stored.get(case["case_id"]), recalls.get(case["case_id"])
        replaced = (replaced_model(model_part(case_node.code), model_part(recall.code))
                    if case_node is not None and recall is not None and recall.code else "")
        lines.append(f"- case {case['case_id']}: {case['operator']} code of {case['dataset']} "
                     f"(gain {case['gain']:+.3f} there): {outcome('as stored', case_node)}; "
                     # a recall adapts the case that did best here, not every case
                     + (outcome("recall", recall) if recall is not None else "not recalled")
                     + (f" ({replaced})" if replaced else ""))
    if not record.get("cases"):
        lines.append("- no case retrieved (no other task of this type in the memory)")
    if record.get("added"):
        lines.append(f"- added to the memory: {record.get('added_cases', 0)} cases, "
                     f"{record.get('added_fixes', 0)} fixes")
    elif record.get("error"):
        lines.append(f"- not added to the memory: {record['error']}")
    return [*lines, ""]


def write_summary(root: Path, task: PreparedTask, journal: Journal,
                  tests: dict[str, float | None], facts: dict[str, Any],
                  selection: Selection | None = None) -> Path:
    lines = [f"# Run {root.name}", ""]
    lines += [f"- {label}: {value}" for label, value in overview(
        journal, facts, target=task.target, task_type=task.task_type,
        metric=task.metric.name, maximize=task.metric.maximize, selection=selection)]
    lines.append("")
    path = shown_path(journal)
    if path:
        lines += ["## Best path", "", "| step | node | operator | valid |", "|---|---|---|---|"]
        lines += [
            f"| {i} | {p['node_id']} | {p['operator']} | {_fmt(p['metric_raw'])} |"
            if p else f"| {i} | | | |"
            for i, p in path
        ]
        lines.append("")
    lines += selection_section(selection, task.metric.name)
    lines += programs_section(journal, facts)
    lines += _excluded_section(journal)
    lines += _verification_section(journal, facts.get("request_warnings") or [])
    lines += analysis_section(journal)
    lines += memory_section(journal, facts.get("memory") or {}, task.metric.name)
    errors = top_errors(journal)
    if errors:
        lines += ["## Top errors", ""] + [f"- {e} ({n}x)" for e, n in errors] + [""]
    lines += ["## Files", ""] + [f"- `{name}`: {what}" for name, what in FILES]
    lines += ["", *model_lines(selection.model if selection else None, root), ""]
    out = root / "summary.md"
    out.write_text("\n".join(lines))
    return out


def model_lines(record: Mapping[str, Any] | None, root: Path) -> list[str]:
    """What `engine.predict` will do with the answer: its saved model, or train it again."""
    command = f"`python -m engine.predict {root} new_rows.csv -o predictions.csv`"
    if record and record.get("saved"):
        if "compose_seconds" in record:
            cost = (f"{record['from']}, put together in {record['compose_seconds']:.1f} s: "
                    "nothing fitted again")
        else:
            cost = (f"fitting took {record['fit_seconds']:.1f} s, predicting the test rows "
                    f"with it {record['replay_seconds']:.1f} s")
        return [f"Predict new rows: {command}, with the answer's saved model in "
                f"`best/model/` ({record['models']} fitted on {record['training']}, "
                f"{record['bytes'] / 2**20:.1f} MiB; {cost}). Add "
                "`--refit` to train it again on train+valid."]
    why = f" (not saved: {record['reason']})" if record else ""
    return [f"Predict new rows: {command}: it trains the answer again{why}; add `--refit` to "
            "train once on train+valid."]


def selection_section(selection: Selection | None, metric: str) -> list[str]:
    """How the answer was chosen (`--select`): the rule, why this node (the comparison that
    decided, an ensemble's check included), and the candidates it weighed with how each
    compared (their test scores reported only)."""
    if selection is None or selection.node_id is None:
        return []
    comparison = selection.comparison
    lines = ["## Final selection", "",
             f"- rule: `--select {selection.rule}` ({selection.method})",
             f"- answer: node {selection.node_id}"
             + (f" ({selection.operator})" if selection.operator else "")
             + f": {selection.reason()}"]
    if comparison.same_predictions:
        lines.append("- not checked again, same valid predictions as a candidate: " + ", ".join(
            f"{node} (= {kept})" for node, kept in comparison.same_predictions))
    if selection.candidates:
        lines += ["", f"| node | operator | valid {metric} | compared | test (reported only) | |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {c.node_id} | {c.operator} | {_fmt(c.valid_raw)} | "
                  f"{selection.comparison_text(c)} | {_fmt(c.test_raw)} | "
                  + ("**in best/** |" if c.node_id == selection.node_id else " |")
                  for c in selection.candidates]
    search_best = comparison.search_best
    if search_best and search_best != selection.node_id:
        lines += ["", f"The best valid score ({search_best}) is not the answer: "
                  f"best/ holds {selection.node_id}."]
    return [*lines, ""]


def _excluded_section(journal: Journal) -> list[str]:
    """Ok nodes the constraints kept from being best, best valid first."""
    excluded = sorted(journal.excluded_nodes, key=lambda e: (-(e[0].metric or 0.0), e[0].step))
    if not excluded:
        return []
    lines = ["## Excluded by constraints", "",
             f"Not eligible as best ({'; '.join(journal.constraints.describe())}):", "",
             "| node | operator | valid | why |", "|---|---|---|---|"]
    lines += [f"| {n.node_id} | {n.operator.value} | {_fmt(n.metric_raw)} | {'; '.join(why)} |"
              for n, why in excluded[:MAX_LISTED]]
    if len(excluded) > MAX_LISTED:
        lines.append(f"| ... {len(excluded) - MAX_LISTED} more | | | |")
    return [*lines, ""]


def _verification_section(journal: Journal, warnings: list[str]) -> list[str]:
    """Request warnings and nodes flagged by implementation verification (still eligible)."""
    flagged = sorted((n for n in journal if n.flags),
                     key=lambda n: (not n.is_ok, -(n.metric or 0.0), n.step))
    if not flagged and not warnings:
        return []
    lines = ["## Verification", ""]
    lines += [f"- request: {w}" for w in warnings]
    if warnings:
        lines.append("")
    if flagged:
        lines += ["Flagged nodes (a flag is a warning: they stay eligible as best):", "",
                  "| node | status | valid | train (in-sample) | flags |", "|---|---|---|---|---|"]
        for node in flagged[:MAX_LISTED]:
            flags = ", ".join(node.flag_list)
            if READS_OUTSIDE_INPUT in node.flag_list:
                flags += " (" + ", ".join(outside_reads(node.code)[:3]) + ")"
            lines.append(f"| {node.node_id} | {node.status.value} | {_fmt(node.metric_raw)} | "
                         f"{_fmt(node.train_metric_raw)} | {flags} |")
        if len(flagged) > MAX_LISTED:
            lines.append(f"| ... {len(flagged) - MAX_LISTED} more | | | | |")
        lines.append("")
    return lines
