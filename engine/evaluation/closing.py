"""The answer's work after the search, estimated so the search stops in time: saving its model
(put together from the fold models its scoring kept, or fitted again), on the holdout its refit
on every train + valid row (after a search on a sample, an ensemble's learning-curve run),
the time runs the one-row limit makes, serving it once, and with
`--select cv` the cross-validation of the top nodes. `closing_seconds` is read after every node
(`Budget.reserve`: the search stops that much before the budget ends) for the answer the
selection would hand over as far as the time runs so far tell (`likely_answer`); the manifest
records what the work took against it (benchmarks/results/budget-end-2026-11-27,
closing-resume-2026-12-07). Pure: estimates from the journal's own runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from engine.config import RunConfig
from engine.deploy.saved_model import answer_members, compose_runs
from engine.evaluation.folds import HOLDOUT, Folds
from engine.evaluation.latency import Timings, one_row_limit, within_limit
from engine.evaluation.select import CV_FOLDS, CV_TOP_K, distinct_best
from engine.task.prepare import PreparedTask
from operators.fitted import TIME_SECONDS
from operators.harness import defines_make_model
from operators.kinds.ensemble import weighted_members
from search.journal import Journal, best_of
from search.node import Node

# Saving the answer's model fits each training set again and replays each once: measured 1.3 to
# 2.8 times its scoring runs' seconds (it over-reserves for an engine-written, unreplayed answer).
SAVE_SHARE = 2.0
# A holdout answer that defines make_model() is saved by its one refit, with no replay: two such
# refits took 0.50 and 0.84 of its scoring runs' seconds scaled to the refit's rows
# (benchmarks/results/big-data-2026-12-07b).
REFIT_SHARE = 1.25
# The answer's work after the search never takes more of the budget than this share.
MAX_CLOSING_SHARE = 0.5
# Putting the answer's model together from its kept fold models: a sandbox start and imports,
# then about 35 ms a MiB of pickle. Measured: benchmarks/results/budget-end-2026-11-27.
COMPOSE_SECONDS = 8.0
COMPOSE_SECONDS_PER_MB = 0.04
# Serving the saved answer once (engine.predict.served_one_row_ms): a session start, its models
# unpickled, 23 calls: 1.7 s (kc1) to 4.2 s (wine-quality-white, 146 MiB) on the 5-minute answers
# (benchmarks/results/closing-resume-2026-12-07).
SERVE_SECONDS = 1.5
SERVE_SECONDS_PER_MB = 0.02


def closing_seconds(journal: Journal, config: RunConfig, folds: Folds | None,
                    task: PreparedTask, executors: int,
                    kept: Mapping[str, Sequence[int]] | None = None,
                    timings: Timings | None = None) -> float:
    """The seconds the work after the search would take if the search ended now, for the
    answer it would hand over (`likely_answer`, by `timings`, the time runs so far): saving the
    answer's model (put together from the fold models its scoring kept, when every one it
    needs is in `kept`, node to the bytes of its models in fold order, and they fit in compose
    runs; else its training sets fitted `executors` at a time), on the holdout its refit on
    every train + valid row, serving it once, and with `--select cv` the cross-validation of
    the top nodes; estimated from the scoring runs of the nodes involved (an ensemble's: its
    weighted members'), at most MAX_CLOSING_SHARE of the budget. Where that answer is a single
    node, the answer may still become the journal's best ensemble of several members (the floor
    makes one every few nodes, and `--select confirmed` prefers one the best does not clearly
    beat): the larger of the two is kept (one arriving at the search's end made the
    reserve jump past the budget: bank-marketing, 2 minutes, took 137 s; benchmarks/results/
    big-data-2026-12-08)."""
    best = likely_answer(journal, timings, one_row_limit(config))
    if best is None:
        return 0.0
    answers = [best]
    # an ensemble of one member is that member (the rule's check skips it as a copy)
    ensemble = best_of(n for n in journal.eligible_nodes
                       if n.operator.traits.combines and len(weighted_members(n)) > 1)
    if ensemble is not None and not best.operator.traits.combines:
        answers.append(ensemble)
    # The journal's best held back by the one-row limit: the selection times every kept node.
    held_back = best.node_id != getattr(journal.best(), "node_id", None)
    return min(max(_answer_closing(answer, journal, config, folds, task, executors, kept,
                                   timings, held_back) for answer in answers),
               MAX_CLOSING_SHARE * config.budget)


def _answer_closing(best: Node, journal: Journal, config: RunConfig, folds: Folds | None,
                    task: PreparedTask, executors: int,
                    kept: Mapping[str, Sequence[int]] | None,
                    timings: Timings | None, held_back: bool) -> float:
    """`closing_seconds` for the answer `best`, uncapped (`held_back`: see there)."""
    # One fit of a node on every training row it learns from, from its scoring: a holdout run
    # scored it with one run on train (fewer rows; on a sample, far fewer), a k-fold run with k
    # runs, one a fold.
    slots = max(1, executors)
    if folds is None or folds.k == HOLDOUT:
        holdout, rounds, k = True, 1, 1
        learned = len(task.train) if folds is None else len(folds.learn_rows(0))
        per_fit = (len(task.train) + len(task.valid_y)) / max(1, learned)
    else:
        holdout, rounds, k = False, -(-folds.k // slots), folds.k
        per_fit = 1.0 / folds.k
    seconds = 0.0
    members = answer_members(best)
    kept = kept or {}
    compose = kept_compose_runs(best, kept)
    megabytes = sum(sum(kept[i]) for i in members if i in kept) / 2**20
    if config.save_model:
        seconds += serve_seconds(megabytes if compose and not holdout
                                 else k * _finite(best.model_mb))
    if config.save_model and not holdout and compose:
        nodes = [journal.get(i) for i in members if i in journal]
        seconds += (COMPOSE_SECONDS * -(-len(compose) // slots)
                    + COMPOSE_SECONDS_PER_MB * megabytes
                    + k * sum((n.predict_ms_per_row or 0.0) * len(task.test_X) / 1000
                              for n in nodes))
    elif config.save_model:
        seconds += save_share(best, holdout) * scoring_seconds(journal, best) * per_fit * rounds
    elif holdout:  # nothing saved: the refit alone
        seconds += scoring_seconds(journal, best) * per_fit
    if folds is not None and folds.sampled and best.operator.traits.combines and members:
        # an ensemble weighed against its members: its best member's run on half the sample
        # (engine/evaluation/rows.py), at most one scoring run of it
        top = best_of(journal.get(i) for i in members if i in journal)
        seconds += scoring_seconds(journal, top) if top is not None else 0.0
    # The time runs the selection makes still: the answer's members not timed yet, and once
    # the journal's best is held back, every kept node not timed yet (what it may give way to).
    untimed = [list(kept[i]) for i in (kept if held_back else members)
               if i in kept and (timings is None or i not in timings.models_ms)]
    if config.save_model and not holdout and untimed:
        seconds += time_run_seconds(untimed)
    if config.select == "cv":
        # Every fold of each top node side by side, dealt to the executors in turn: the
        # busiest executor's share.
        runs = [per_fit * scoring_seconds(journal, n)
                for n in distinct_best(journal.eligible_nodes)[:CV_TOP_K] for _ in range(CV_FOLDS)]
        seconds += max(sum(runs[i::slots]) for i in range(slots))
    return seconds


def likely_answer(journal: Journal, timings: Timings | None, limit: float) -> Node | None:
    """The node the selection would hand over as far as the time runs so far tell: the
    journal's best, or when it was measured over `limit`, what it gives way to
    (`within_limit`: the best measured within it, else the fastest)."""
    best = journal.best()
    if best is None or timings is None:
        return best
    members = {n.node_id: answer_members(n) for n in journal.eligible_nodes}
    among, fastest = within_limit(journal, best.node_id, members, timings, limit)
    return among.best() or (journal.get(fastest) if fastest is not None else best)


def kept_compose_runs(node: Node, kept: Mapping[str, Sequence[int]]) -> list[list[int]] | None:
    """The compose runs that would put `node`'s model together from its members' kept fold
    models (`kept`: node to the bytes of its models in fold order); None when a member's are
    not kept or a fold is too big for any run: the answer is fitted again."""
    members = answer_members(node)
    if not members or any(i not in kept for i in members):
        return None
    return compose_runs([list(kept[i]) for i in members])


def time_run_seconds(sizes: Sequence[Sequence[int]]) -> float:
    """The time run over the kept fold models of the answer's members (`kept_timings`; the
    bytes of each member's in fold order): a sandbox start and imports, the unpickling, and
    at most about TIME_SECONDS of calls a member. A second run over every kept node, when
    the answer is over the limit, is not kept back for."""
    megabytes = sum(map(sum, sizes)) / 2**20
    return COMPOSE_SECONDS + COMPOSE_SECONDS_PER_MB * megabytes + TIME_SECONDS * len(sizes)


def serve_seconds(megabytes: float) -> float:
    """Serving a saved answer of `megabytes` once, to time it as a user gets it."""
    return SERVE_SECONDS + SERVE_SECONDS_PER_MB * megabytes


def save_share(node: Node, holdout: bool) -> float:
    """The seconds saving `node`'s model takes, as a multiple of its scoring runs' (scaled to
    the rows it learns from)."""
    return REFIT_SHARE if holdout and defines_make_model(node.code) else SAVE_SHARE


def scoring_seconds(journal: Journal, node: Node) -> float:
    """The seconds a node's scoring runs took, but for a feature program's gate fits (a refit
    fits the model alone; the 5 M-row run's gates were three quarters of its members' runs:
    benchmarks/results/big-data-2026-12-07c); an ensemble's are its weighted members'."""
    ids = weighted_members(node) if node.operator.traits.combines else [node.node_id]
    members = [journal.get(i) for i in ids if i in journal]
    return sum(max(0.0, n.exec_seconds - (n.gate_seconds or 0.0)) for n in members)


def _finite(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) else 0.0
