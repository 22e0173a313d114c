"""The run's answer: the node `--select` chooses (engine/evaluation/select.py), put in best/ with
its predictions, its fitted models saved (engine/deploy/saved_model.py) and, on the holdout,
refitted on every train + valid row (after a search on a sample, on as many as the budget left
affords: engine/evaluation/rows.py, where an ensemble held to part of the rows is weighed
against its members refitted on more). Runs on the search's executors: selection and fitting
run scripts in the same sandboxes as every candidate.

That work comes out of the budget: engine/evaluation/closing.py estimates it, and the search
stops that much before the budget ends (`Budget.reserve`), so the process ends near the time
the user asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd
from rich.console import Console

from engine.config import RunConfig
from engine.deploy.saved_model import (
    FittedAnswer,
    answer_members,
    compose_answer,
    compose_runs,
    fit_answer,
    keep,
    saved_answer,
    training_inputs,
)
from engine.evaluation.folds import (
    HOLDOUT,
    Folds,
    dev_labels,
    make_folds,
    search_task,
)
from engine.evaluation.latency import (
    Timings,
    ensemble_within,
    measured_within,
    one_row_limit,
    time_models,
    within_limit,
)
from engine.evaluation.rows import refit_rows, weigh_rows
from engine.evaluation.scoring import HeldOut, SubmissionError, score
from engine.evaluation.select import (
    CV_FOLDS,
    CV_TOP_K,
    METHODS,
    BatchRunner,
    Runner,
    cross_fitted_score,
    select_by_cv,
    select_confirmed,
)
from engine.evaluation.selection import Comparison, Latency, Refit, Selection
from engine.records.recorder import NodeRecorder
from engine.records.runs import kept_predictions
from engine.records.store import RunStore
from engine.task.prepare import PreparedTask
from operators.context import TaskContext
from operators.fitted import fitted_objects
from sandbox import Limits
from search.journal import Journal
from search.node import Node


def select_final(store: RunStore, task: PreparedTask, journal: Journal,
                 tests: dict[str, float | None], config: RunConfig,
                 console: Console, run: Runner, run_all: BatchRunner,
                 seconds_left: float | None = None, ctx: TaskContext | None = None,
                 known: Timings | None = None,
                 serve: Callable[[], float | None] | None = None) -> Selection:
    """Choose the node the run hands over (`--select`, see engine/evaluation/select.py), make it
    the journal's `final` and put it in best/; return the record of the choice, the one place
    a `Selection` is made. `run` runs one script on the executors, `run_all` several side by
    side; `seconds_left` is what the budget leaves for it (None: no limit); with the search's
    `ctx`, a choice over the one-row limit may give way to an ensemble made to fit it
    (engine/evaluation/latency.py), stored as a node and its test score added to `tests`;
    `known`: the search's time runs (`limit_timings`), not run again; `serve`: the saved
    answer's one-row p50 as served (engine.predict.served_one_row_ms), recorded, and held to
    a limit the run states (`serving_timings`)."""
    best = journal.best()
    if best is None:
        return Selection(config.select, METHODS[config.select], None, "", Comparison(None))
    search_best: Node = best
    limits = Limits(wall_seconds=config.exec_timeout)
    folds = store.load_folds()
    plan = folds or make_folds(task, 1)  # None: a run stored before folds, scored on the holdout
    held_out_labels = dev_labels(task).iloc[plan.held_out]
    # The nodes' kept test predictions are of the test rows their search predicted (a sample,
    # when it searched one): the answer's own are its refit's, of every test row.
    searched = search_task(task, plan)

    def kept_valid(node_id: str) -> bytes | None:
        return store.read_predictions(node_id, "valid")

    def decide(among: Journal) -> Comparison:
        """The rule's choice among `among`'s eligible nodes."""
        if config.select == "cv":
            console.print(f"selecting the final best by {CV_FOLDS}-fold cross-validation of "
                          f"the top {CV_TOP_K} nodes on train+valid", markup=False)
            return select_by_cv(task, among, run_all, seed=config.seed, limits=limits)
        if config.select == "confirmed":
            return select_confirmed(task, among, kept_valid, seed=config.seed,
                                    truth=held_out_labels)
        top = among.best()
        return Comparison(top.node_id if top else None, top.node_id if top else None)

    comparison = decide(journal)
    limit = one_row_limit(config)
    members = {n.node_id: answer_members(n) for n in journal.eligible_nodes}
    first = comparison.winner or best.node_id
    timings = (limit_timings(store, task, journal, first, members, run, limits, limit, known)
               if config.save_model else None)
    held_back: tuple[tuple[str, float], ...] = ()
    held_back_members: tuple[tuple[str, float], ...] = ()
    none_fit = False
    unmeasured: tuple[str, ...] = ()

    def give_way(first: str, timings: Timings) -> tuple[Comparison, Node, bool] | None:
        """What the rule chooses once `first` is over the limit by `timings`: an ensemble
        made to fit is offered first, then the rule chooses among the nodes measured within
        it (the fastest when none is); its choice, the best of them, whether none fit. None
        when `first` fits or was not measured."""
        among, fastest = within_limit(journal, first, members, timings, limit)
        if among is journal:
            return None
        made = ctx is not None and fitting_ensemble(
            store, searched, ctx, journal, timings, limit, journal.get(first), held_out_labels)
        if made:
            node, predictions = made
            NodeRecorder(store, searched, journal).record(node, predictions.test_raw,
                                                      predictions, None)
            tests[node.node_id] = predictions.test_raw
            members[node.node_id] = answer_members(node)
            console.print(f"made ensemble {node.node_id}: {node.plan}", markup=False)
            among, fastest = within_limit(journal, first, members, timings, limit)
        return ((Comparison(fastest, comparison.search_best) if fastest is not None
                 else decide(among)), among.best() or search_best, fastest is not None)

    given = give_way(first, timings) if timings is not None else None
    if timings is not None and given is not None:
        held_back = ((first, timings.known_ms(members[first]) or 0.0),)
        held_back_members = tuple((i, timings.models_ms[i]) for i in members[first]
                                  if i in timings.models_ms)
        unmeasured = tuple(i for i in members[first] if i not in timings.models_ms)
        comparison, best, none_fit = given

    def hand_over(winner: str, best: Node) -> tuple[str, Node, str, FittedAnswer | None,
                                                     Refit | None]:
        """Put `winner` in best/ (its predictions, its saved model, the holdout's refit): the
        node it ended as (`best` when a re-run failed), why, its fits and its refit."""
        node, note = journal.get(winner), ""
        valid = store.read_predictions(winner, "valid")
        test = store.read_predictions(winner, "test") if searched is task else None
        if valid is None and winner != best.node_id:
            # A run stored before predictions were kept: run the winner again for its files.
            result = run(node.code, task.inputs(), limits)
            if result.status == "ok":
                valid, test = result.valid_csv, result.test_csv
            else:
                note = (f"the chosen node {winner} failed when re-run ({result.error}): the "
                        "best valid score")
                winner, node = best.node_id, best
        fitted, refit = None, None
        rows = refit_rows(task, journal, node, folds, seconds_left)
        if valid is not None and config.save_model:
            fitted = saved_answer(store.root / "best", winner)
            if fitted is not None:
                console.print("the answer is the one already saved: its fitted models are "
                              "kept", markup=False)
            else:
                fitted = (kept_model(store, task, node, folds, run_all, limits, console)
                          or fit_model(task, node, folds, run_all, limits, console, rows))
        if valid is not None and folds is not None and folds.k == HOLDOUT:
            # Scored on the holdout, the answer learned from train alone: it learns once more
            # from every train + valid row, and that is what best/ ships and the summary
            # scores (the saved model's fit is that refit, when there is one).
            if fitted is not None and fitted.test_csvs:
                test, refit = fitted.test_csvs[0], Refit(
                    score(task, fitted.test_csvs[0], "test"), rows=rows)
            elif fitted is not None and folds.sampled:  # its one refit failed: no second
                refit = Refit(error=f"the refit failed ({fitted.record.get('reason')}); best/ "
                                    "holds the answer fitted on the search's sample"
                                    + (", without test predictions" * (test is None)))
            else:
                test, refit = refit_answer(task, node, run, limits, test, rows)
        if valid is not None:
            store.write_best(node, valid, test)
            if fitted is not None:
                keep(store.root / "best", fitted)
        return winner, node, note, fitted, refit

    answer = journal.get(comparison.winner or best.node_id)
    if seconds_left is not None and (weighed := weigh_rows(
            task, searched, journal, plan, answer, seconds_left, run, limits,
            held_out_labels)) is not None:  # an ensemble held to part of the rows
        seconds_left -= weighed.seconds
        console.print(f"the answer's rows weighed: {weighed.text(answer.node_id)}", markup=False)
        if weighed.chosen != answer.node_id:
            comparison = replace(comparison, winner=weighed.chosen,
                                 note=weighed.text(answer.node_id))
            best = journal.get(weighed.chosen)
    winner, node, note, fitted, refit = hand_over(comparison.winner or best.node_id, best)
    measured = answer_timings(task, node, timings, fitted, run, limits)
    ms = answer_latency(node, measured)[0]
    if ms is not None and ms > limit and not held_back and not none_fit:
        # Timed only once saved (no kept fold models of its own, too big to keep): the next
        # best answer that was timed within the limit, when there is one.
        timings = kept_timings(store, task, journal, store.kept_fold_models(), run, limits,
                               timings)
        fits = measured_within(journal, members, timings, limit) if timings else None
        if fits is not None and (top := fits.best()) is not None:
            held_back, comparison = ((winner, ms),), decide(fits)
            held_back_members = answer_latency(node, measured)[2]
            winner, node, note, fitted, refit = hand_over(comparison.winner or top.node_id,
                                                          top)
            measured = answer_timings(task, node, timings, fitted, run, limits)

    def served() -> float | None:
        return serve() if serve is not None else None

    served_ms = served()
    served_over: tuple[tuple[str, float], ...] = ()
    serving = serving_timings(timings, answer_members(node), served_ms)
    # A stated limit holds as served. The default one (ONE_ROW_MS) keeps to the time run: serving
    # itself costs 11 to 13 ms here, so held as served it left room for single models alone and
    # lost the ensembles' accuracy (california, moneyball); and only when some node would serve
    # within it: else the fastest loses accuracy and serves over it all the same
    # (benchmarks/results/served-limit-2026-12-07).
    stated = config.max_predict_ms_per_row is not None
    if (stated and serving is not None and served_ms is not None and served_ms > limit
            and not none_fit):
        given = give_way(winner, serving)
        if given is not None and not given[2]:
            served_over = ((winner, served_ms),)
            comparison, top, none_fit = given
            winner, node, note, fitted, refit = hand_over(comparison.winner or top.node_id,
                                                          top)
            measured = answer_timings(task, node, timings, fitted, run, limits)
            served_ms = served()
    journal.choose(winner)
    latency = Latency(limit, *answer_latency(node, measured), held_back=held_back,
                      none_fit=none_fit, held_back_members=held_back_members,
                      held_back_unmeasured=unmeasured, served_ms=served_ms,
                      served_over=served_over)
    if measured is not None:
        console.print(f"the answer's {latency.text()}", markup=False)
    return Selection(
        config.select, METHODS[config.select], winner, node.operator.value, comparison,
        note=note, refit=refit, model=fitted.record if fitted is not None else None,
        latency=latency,
        # an ensemble: its valid score scored the weights it chose
        cross_fitted_raw=cross_fitted_score(task, node, kept_valid, held_out_labels,
                                            plan.groups(config.seed)),
    ).with_tests(tests)


def serving_timings(timings: Timings | None, members: Sequence[str],
                    served_ms: float | None) -> Timings | None:
    """`timings` with a request costing what serving the answer made of `members` showed
    beyond them: a served call also pays the session's pipe and the engine's reading of the
    reply, and its models run colder (8 to 22 ms more on the lite tasks: benchmarks/results/
    latency-arrays-2026-12-07). None when the answer's members were not all timed, or it was
    not served."""
    measured = None if timings is None else timings.answer_ms(members)
    if timings is None or measured is None or served_ms is None:
        return None
    return Timings(timings.request_ms + max(0.0, served_ms - measured), timings.models_ms,
                   timings.members_ms)


def fitting_ensemble(store: RunStore, task: PreparedTask, ctx: TaskContext, journal: Journal,
                     timings: Timings, limit: float, held_back: Node,
                     truth: pd.Series) -> tuple[Node, HeldOut] | None:
    """`ensemble_within` over the measured nodes' kept predictions."""
    measured = (journal.get(i) for i in timings.models_ms if i in journal)
    kept = {node.node_id: held for node, held in kept_predictions(store, task, measured,
                                                                  len(truth))}
    return ensemble_within(task, ctx, journal, kept, truth, timings, limit, held_back)


def kept_timings(store: RunStore, task: PreparedTask, journal: Journal, ids: Iterable[str],
                 run: Runner, limits: Any, known: Timings | None = None) -> Timings | None:
    """The fold models the search kept of the nodes `ids` (the answer's candidates and their
    members), each node's timed on one row in one sandbox run, added to `known` (whose nodes
    are not timed again); None when nothing is kept or known."""
    groups = {i: states for i in ids if i in journal and (known is None or i not in
                                                          known.models_ms)
              and (states := store.read_fold_models(i))}
    code = next((journal.get(i).code for i in groups), "")
    timed = time_models(task, code, groups, run, limits)
    return timed if known is None else known.adding(timed)


def limit_timings(store: RunStore, task: PreparedTask, journal: Journal, first: str,
                  members: Mapping[str, list[str]], run: Runner, limits: Any, limit: float,
                  known: Timings | None = None) -> Timings | None:
    """The time runs that tell whether `first` is within the one-row `limit`: its members'
    kept fold models, and when they are over it, every kept node's (what the choice may give
    way to); `known`'s nodes are not timed again."""
    timings = kept_timings(store, task, journal, members.get(first, []), run, limits, known)
    if timings is not None and (timings.known_ms(members.get(first, [])) or 0.0) > limit:
        timings = kept_timings(store, task, journal, store.kept_fold_models(), run, limits,
                               timings)
    return timings


def answer_timings(task: PreparedTask, node: Node, timings: Timings | None,
                   fitted: FittedAnswer | None, run: Runner, limits: Any) -> Timings | None:
    """What times the answer: the kept models' timings when they hold every member of it,
    else its saved fitted models timed now (a holdout run's, a refitted answer's); None
    when neither can (nothing saved, or a replay's fits)."""
    if timings is not None and timings.answer_ms(answer_members(node)) is not None:
        return timings
    if fitted is None or not fitted.states or not fitted_objects(fitted.states):
        return None
    return time_models(task, node.code, {node.node_id: fitted.states}, run, limits)


def answer_latency(node: Node, timings: Timings | None
                   ) -> tuple[float | None, float | None, tuple[tuple[str, float], ...]]:
    """The answer's one-row ms, a request's own, and each member's models (its own models
    when it is not an ensemble, or its members could not be told apart)."""
    if timings is None:
        return None, None, ()
    ids = answer_members(node)
    if timings.answer_ms(ids) is not None:
        return (timings.answer_ms(ids), timings.request_ms,
                tuple((i, timings.models_ms[i]) for i in ids))
    own = timings.members_ms.get(node.node_id, ())
    parts = (tuple(zip(ids, own, strict=True)) if len(own) == len(ids) else
             ((node.node_id, timings.models_ms[node.node_id]),))
    return timings.answer_ms([node.node_id]), timings.request_ms, parts


def kept_model(store: RunStore, task: PreparedTask, node: Node, folds: Folds | None,
               run_all: BatchRunner, limits: Any, console: Console) -> FittedAnswer | None:
    """The answer's saved model put together from the fold models its scoring kept (its own,
    or its members'), or None when they are not all kept or do not check out."""
    members = answer_members(node)
    if folds is None or folds.k == HOLDOUT or not members:
        return None
    states = [store.read_fold_models(member) for member in members]
    tests = [store.read_predictions(member, "test") for member in members]
    if any(s is None or len(s) != folds.k for s in states) or None in tests:
        return None
    runs = compose_runs([[len(state) for state in s] for s in states if s is not None])
    if runs is None:
        console.print("the fold models its scoring kept are too big to put together: the "
                      "answer is fitted again", markup=False)
        return None
    console.print(f"saving the answer's model from the {folds.k * len(members)} fold models "
                  f"its scoring kept{f' ({len(runs)} runs)' * (len(runs) > 1)}", markup=False)
    return compose_answer(task, node.node_id, node.code, [s for s in states if s is not None],
                          [t for t in tests if t is not None], run_all, limits)


def fit_model(task: PreparedTask, node: Node, folds: Folds | None, run_all: BatchRunner,
              limits: Any, console: Console, rows: int | None = None) -> FittedAnswer:
    """The answer fitted once per training set with its fits saved
    (engine/deploy/saved_model.py)."""
    count = 1 if folds is None or folds.k == HOLDOUT else folds.k
    on = "" if rows is None else f" on {rows} train + valid rows, what the budget affords"
    console.print(f"saving the answer's fitted model{'s' * (count > 1)} ({count} fit"
                  f"{'s' * (count > 1)}{on})", markup=False)
    fitted = fit_answer(task, node.node_id, node.code, folds, run_all, limits, rows)
    if not fitted.record["saved"]:
        console.print(f"the answer's model is not saved ({fitted.record['reason']}); "
                      "engine.predict will train it again", markup=False)
    return fitted


def refit_answer(task: PreparedTask, node: Node, run: Runner, limits: Any,
                 test: bytes | None, rows: int | None = None) -> tuple[bytes | None, Refit]:
    """The answer fitted on every train + valid row (or `rows` of them: `refit_rows`): its
    test predictions and their score, or the search's own ones (and why) when that run
    fails."""
    (inputs,) = training_inputs(task, make_folds(task, 1), rows)
    result = run(node.code, inputs, limits)
    try:
        if result.status != "ok":
            raise SubmissionError(f"{result.status}: {result.error}")
        return result.test_csv, Refit(score(task, result.test_csv, "test"), rows=rows)
    except SubmissionError as exc:
        return test, Refit(error=f"the refit on train + valid failed ({exc}); best/ holds "
                                 "the answer fitted on train"
                                 + (", without test predictions" * (test is None)))
