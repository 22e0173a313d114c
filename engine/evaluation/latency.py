"""The answer's warm one-row latency, and the limit the final selection keeps it under.

A served request (`engine.predict`'s session, `load().predict`) predicts its rows with every
saved model of the answer: a k-fold run's k fold models, each of an ensemble's members in
each. So the answer's one-row latency is a request's own work (reading its CSV, writing the
reply) plus, for each member, the time of its k fold models on one row. Both are measured at
the final selection in a sandbox run over the fold models the search kept (`time_models`: the
median of warm calls; operators/fitted.py TIME): the chosen answer's members first, every kept
node only when it is over the limit (once already when a search round ends at the clock, so
the reserve kept for the answer is the one it will be: engine/search_run.py); trials measure
nothing more. The session's pipe and the
engine's reading of the reply are not in it (`load().predict` against it:
benchmarks/results/latency-limit-2026-12-07).

Once the answer is saved it is served as a user serves it (engine.predict.served_one_row_ms) and
the record gives that p50 too; over a limit the run states, the rule chooses once more with a
request costing what serving added (final.py `serving_timings`).

The limit is the run's `max_predict_ms_per_row` when one is stated (the one fact "a row's
prediction takes at most this"; the search checks it per row of a batch, the selection on one
row alone), else ONE_ROW_MS. When the rule's choice is over it, the rule chooses again
among the nodes measured within it (`within_limit`): an ensemble with a slow member gives way
to the next best answer that fits, often an ensemble of fewer or faster members; when no
measured node fits, the fastest is taken. A choice without kept fold models to time (every
node of a holdout run, an LLM-written script, fold models too big to keep) is timed once
saved; over the limit, it gives way to the best node measured within it (`measured_within`),
saved in its place, when there is one. An ensemble whose measured members are over the limit
already is held back before it is fitted and saved, however its unmeasured members would
add to it (wine-quality-white's fitted, timed at 60 ms and then replaced: 30 s past a 2-minute
budget, benchmarks/results/latency-arrays-2026-12-07).

Before that re-choice, the held-back answer's room is offered to an ensemble that fits
(`ensemble_within`): ensemble selection over the measured single nodes, each round picking only
a node that keeps the picked ones' summed one-row ms within what the limit leaves a request.
It is a node of the journal like the search's ensembles, chosen only when the rule prefers it.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from engine.config import RunConfig
from engine.evaluation.blend import ensemble_selection
from engine.evaluation.scoring import HeldOut
from engine.evaluation.select import Runner
from engine.task.prepare import PreparedTask, csv_bytes
from operators.context import TaskContext
from operators.fitted import KEPT_PREFIX, LATENCY_MARK, SOLUTION_FILE, TIME, fitted_wrapper
from operators.kinds.ensemble import ensemble_cost, ensemble_written
from sandbox import Limits
from search.journal import Journal
from search.node import Node, Operator, Status, code_hash

# AutoGluon's `infer_limit` is the anchor; 20 ms keeps a warm one-row prediction interactive,
# and the floor's ensembles of forests reached 60 to 250 ms (benchmarks/results/
# latency-limit-2026-12-07).
ONE_ROW_MS = 20.0


@dataclass(frozen=True, slots=True)
class Timings:
    """What a time run measured, in ms: a request's own work, and each group's models (a
    node's fold models) on one row, with an ensemble's members each (`members`)."""

    request_ms: float
    models_ms: dict[str, float] = field(default_factory=dict)
    members_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def answer_ms(self, members: Iterable[str]) -> float | None:
        """One warm request of an answer made of `members`' models (a node alone: itself);
        None when one of them was not measured."""
        ids = list(members)
        if not ids or any(i not in self.models_ms for i in ids):
            return None
        return self.request_ms + sum(self.models_ms[i] for i in ids)

    def known_ms(self, members: Iterable[str]) -> float | None:
        """`answer_ms`, or when some members were not measured (fold models too big to keep)
        what the measured ones and a request take already, a lower bound; None when no
        member was measured."""
        ids = list(members)
        measured = [self.models_ms[i] for i in ids if i in self.models_ms]
        return self.request_ms + sum(measured) if measured else None

    def adding(self, later: Timings | None) -> Timings:
        """These timings with a later run's groups added (a request's cost stays this run's,
        so every node is compared against the same one)."""
        if later is None:
            return self
        return Timings(self.request_ms, self.models_ms | later.models_ms,
                       self.members_ms | later.members_ms)


def read_timings(stdout: str, names: list[str]) -> Timings | None:
    """A time run's line, its groups named by `names` in order; None without a whole one."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(LATENCY_MARK):
            try:
                data = json.loads(line[len(LATENCY_MARK):])
                groups = data["groups"]
                if len(groups) != len(names):
                    return None
                return Timings(float(data["request_ms"]),
                               {n: float(g["ms"]) for n, g in zip(names, groups, strict=True)},
                               {n: tuple(map(float, g["members"]))
                                for n, g in zip(names, groups, strict=True) if "members" in g})
            except (ValueError, KeyError, TypeError):
                return None
    return None


def time_inputs(task: PreparedTask, code: str,
                groups: Mapping[str, list[bytes]]) -> dict[str, bytes]:
    """The input/ folder of a time run: `code` (engine-written make_model() code, loaded as
    the models' module), one test row, and each group's pickled fitted models."""
    inputs = {SOLUTION_FILE: code.encode("utf-8"), "test.csv": csv_bytes(task.test_X.head(1))}
    for group, states in enumerate(groups.values()):
        inputs |= {f"{KEPT_PREFIX}-{group}-{index}.pkl": state
                   for index, state in enumerate(states)}
    return inputs


def time_models(task: PreparedTask, code: str, groups: Mapping[str, list[bytes]], run: Runner,
                limits: Limits) -> Timings | None:
    """Each group's fitted models (name to pickled fitted make_model()s) timed on one test row
    in one sandbox run, `code` their module; None when the run fails or measures nothing."""
    if not groups:
        return None
    result = run(fitted_wrapper(TIME), time_inputs(task, code, groups), limits)
    if result.status != "ok":
        return None
    return read_timings(result.stdout_tail, list(groups))


def over_limit(nodes: Iterable[Node], members: Mapping[str, list[str]], timings: Timings,
               limit_ms: float) -> dict[str, float]:
    """The nodes whose measured one-row latency is over `limit_ms`, with it (a node with
    members not measured: when those measured are over it already); `members` gives each
    node's members (a node alone: itself)."""
    out = {}
    for node in nodes:
        ms = timings.known_ms(members.get(node.node_id, ()))
        if ms is not None and ms > limit_ms:
            out[node.node_id] = ms
    return out


def fastest(nodes: Iterable[Node], members: Mapping[str, list[str]],
            timings: Timings) -> str | None:
    """The measured node with the lowest one-row latency (the best valid among equals)."""
    measured = [(ms, -(n.metric or 0.0), n.step, n.node_id) for n in nodes
                if (ms := timings.answer_ms(members.get(n.node_id, ()))) is not None]
    return min(measured)[3] if measured else None


def within_limit(journal: Journal, chosen: str, members: Mapping[str, list[str]],
                 timings: Timings, limit_ms: float) -> tuple[Journal, str | None]:
    """What the rule chooses among once its choice `chosen` is measured over `limit_ms`: the
    journal with only the nodes measured within it eligible (one not measured is not known
    to fit), and, when there are none, the fastest measured node (else None). `journal`
    itself and None when `chosen` fits or was not measured."""
    nodes = journal.eligible_nodes
    if chosen not in over_limit(nodes, members, timings, limit_ms):
        return journal, None
    among = measured_within(journal, members, timings, limit_ms)
    return among, None if among.best() is not None else fastest(nodes, members, timings)


def measured_within(journal: Journal, members: Mapping[str, list[str]], timings: Timings,
                    limit_ms: float) -> Journal:
    """The journal with only the nodes measured within `limit_ms` eligible."""
    return journal.without(
        n.node_id for n in journal.eligible_nodes
        if (ms := timings.answer_ms(members.get(n.node_id, ()))) is None or ms > limit_ms)


def ensemble_within(task: PreparedTask, ctx: TaskContext, journal: Journal,
                    kept: Mapping[str, HeldOut], truth: pd.Series, timings: Timings,
                    limit_ms: float, held_back: Node) -> tuple[Node, HeldOut] | None:
    """An ensemble of the measured single nodes in `kept` (their held-out predictions) whose
    one-row ms, a request's and its members' together, is within `limit_ms`, made a node like
    the search's ensembles (after `held_back`, the choice it stands in for); None when fewer
    than two fit together. Its hint names its members alone: the candidates' costs are not in
    the node, so its cross-fitted score re-selects weights among the members."""
    room = limit_ms - timings.request_ms
    singles = {i: p for i, p in kept.items()
               if i in journal and not journal.get(i).operator.traits.combines
               and timings.models_ms.get(i, float("inf")) <= room}
    weights, predictions = ensemble_selection(task, singles, truth, costs=timings.models_ms,
                                              budget=room)
    if predictions is None or len(weights) < 2:
        return None
    members = [journal.get(i) for i in weights]
    written = ensemble_written(ctx, members, weights, len(singles))
    now = time.time()
    node = Node(
        node_id=secrets.token_hex(6), parent_id=held_back.parent_id,
        operator=Operator.ENSEMBLE, status=Status.OK, step=len(journal),
        depth=held_back.depth, run_id=held_back.run_id, policy=held_back.policy,
        plan=f"{written.plan} (within the {limit_ms:g} ms one-row limit)",
        hint=",".join(weights), code=written.code, code_hash=code_hash(written.code),
        metric=task.metric.normalise(predictions.valid_raw), metric_raw=predictions.valid_raw,
        created_at=now, finished_at=now, **ensemble_cost(members).node_fields())
    return node, predictions


def one_row_limit(config: RunConfig) -> float:
    """The one-row latency the answer is held to: the stated per-row limit, else ONE_ROW_MS."""
    stated = config.max_predict_ms_per_row
    return ONE_ROW_MS if stated is None else stated
