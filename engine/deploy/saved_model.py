"""The answer's saved model: fitted once at the end of a run, so `engine.predict` and
`Predictor.predict` predict new rows without training.

`compose_answer` puts it together from the fold models the scoring runs of the answer (or of
its members) already fitted and kept, checked against what each member scored, so nothing is
fitted again; `answer_candidates` says whose fold models the search keeps for that. Otherwise
`fit_answer` runs the answer once per training set with its model saved
(operators/fitted.py). A fitted make_model() is unpickled and checked in that same run; a
replay's fits are replayed once more on the same rows: the state is kept only if that replay
gives the saved run's own test predictions. The training sets are the ones
the answer's test predictions came from: a k-fold run's k fold models (learn rows of each
fold, their predictions combined as `best/submission/test.csv` was), a holdout run's single
model refitted on every train + valid row (what `best/` ships, engine/evaluation/final.py
`refit_answer`).

Layout, in `best/model/` (`keep`, written whole or not at all):
- `fold-<i>.pkl`: the model of training set i, a pickle loaded only inside the sandbox: the
  fitted `make_model()` itself (`form` "fitted model": predicting reads no training rows) or
  a replay's fits (`form` "replay": LLM-written `fit_predict` code);
- `model.json`: the node it belongs to, the form, the training sets, sizes and seconds.

When the answer cannot be saved (a fit that does not pickle, a replay that differs), the
manifest's `model` record says why, and predicting trains the answer again, as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine.evaluation.folds import HOLDOUT, Folds, dev_frame, fold_inputs
from engine.evaluation.scoring import (
    SubmissionError,
    combine_predictions,
    frame_csv,
    read_stacked,
    read_submission,
)
from engine.evaluation.select import BatchRunner
from engine.task.prepare import PreparedTask, csv_bytes
from fileio import replacing_dir
from operators.fitted import (
    COMPOSE,
    FITTED_PREFIX,
    KEPT_PREFIX,
    LOAD,
    SAVE,
    SOLUTION_FILE,
    UNSAVED_MARK,
    fitted_objects,
    fitted_wrapper,
    fold_states,
)
from operators.harness import defines_make_model
from operators.kinds.ensemble import weighted_members
from sandbox import SUBMISSION_CAP, ExecResult, Limits
from search.floor import ensemble_candidates
from search.journal import Journal
from search.node import Node

MODEL_DIR = "model"  # under best/
# The best eligible nodes whose fold models (and whose members') scoring keeps: the final
# selection chooses among the top 3 (engine/evaluation/select.py).
ANSWER_CANDIDATES = 5
INFO_FILE = "model.json"


def training_inputs(task: PreparedTask, folds: Folds | None,
                    rows: int | None = None) -> list[dict[str, bytes]]:
    """The input/ folder of each model of the answer: each fold's (learn rows, held-out rows,
    test) for a k-fold run; for a holdout run every train + valid row, or with `rows` (a
    sampled search's refit that the budget does not afford on every row) that many of them,
    drawn at random, the same for the same folds."""
    if folds is None or folds.k == HOLDOUT:
        dev = dev_frame(task)
        if rows is not None and rows < len(dev):
            seed = 0 if folds is None else folds.seed
            dev = dev.iloc[np.sort(np.random.default_rng(seed).permutation(len(dev))[:rows])]
        return [{**task.inputs(), "train.csv": csv_bytes(dev)}]
    return [fold_inputs(task, folds, fold) for fold in range(folds.k)]


def _why(result: ExecResult) -> str:
    for line in result.stderr_tail.splitlines():
        if line.startswith(UNSAVED_MARK):
            return line[len(UNSAVED_MARK):]
    return result.error or f"it ended with status {result.status}"


def same_predictions(task: PreparedTask, a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Equal labels and numbers equal to float precision (a replay recomputes in the same
    order, so anything looser would hide a real difference)."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return False
    for column in a.columns:
        if column == "prediction" and task.task_type != "regression":
            if not (a[column].astype(str).to_numpy() == b[column].astype(str).to_numpy()).all():
                return False
        elif not np.allclose(a[column].to_numpy(dtype=float), b[column].to_numpy(dtype=float),
                             rtol=1e-9, atol=1e-12, equal_nan=True):
            return False
    return True


@dataclass(frozen=True)
class FittedAnswer:
    """The answer fitted once per training set: the manifest's record (`saved`, or why not),
    the fits of each, and each fit's test predictions (a holdout run's is its refit's)."""

    record: dict[str, Any]
    states: list[bytes] = field(default_factory=list)
    test_csvs: list[bytes] = field(default_factory=list)


def fit_answer(task: PreparedTask, node_id: str, code: str, folds: Folds | None,
               run_all: BatchRunner, limits: Limits, rows: int | None = None) -> FittedAnswer:
    """Fit the answer once per training set and save it: a fitted make_model() whole (checked
    in its save run), or a replay's fits, then replayed: kept only if every replay reproduces
    its fit's test predictions. The fits run side by side on the executors, then the
    replays."""
    trainings = [{**inputs, SOLUTION_FILE: code.encode("utf-8")}
                 for inputs in training_inputs(task, folds, rows)]
    fits = run_all([(fitted_wrapper(SAVE), inputs, limits) for inputs in trainings])
    # Every fit's test predictions, kept even when its model is not saved: a holdout run's
    # refit is then scored by them, not fitted a second time.
    tests = ([saved.test_csv or b"" for saved in fits]
             if all(saved.status == "ok" and saved.test_csv is not None for saved in fits)
             else [])

    def unsaved(reason: str) -> FittedAnswer:
        return FittedAnswer({"saved": False, "reason": reason}, test_csvs=tests)

    for index, saved in enumerate(fits):
        where = f"model {index + 1}"
        if saved.status != "ok" or saved.fitted is None or saved.test_csv is None:
            return unsaved(f"{where}: {_why(saved)}")
        if len(saved.fitted) >= SUBMISSION_CAP:
            return unsaved(f"{where}: its fits take over {SUBMISSION_CAP // 2**20} MiB")
    # A fitted make_model() was unpickled and checked in its own save run (operators/fitted.py):
    # only a replay's fits are replayed here.
    models = fitted_objects([saved.fitted or b"" for saved in fits])
    replays = [] if models else run_all([(fitted_wrapper(LOAD), replay_inputs(
        [inputs["train.csv"]], code, [saved.fitted or b""], inputs["valid.csv"],
        inputs["test.csv"]), limits) for inputs, saved in zip(trainings, fits, strict=True)])
    for index, (saved, replayed) in enumerate(zip(fits if replays else [], replays, strict=True)):
        where = f"model {index + 1}"
        if replayed.status != "ok":
            return unsaved(f"{where}: the replay failed: {_why(replayed)}")
        try:
            (again,) = read_stacked(task, replayed.test_csv, "test", len(task.test_X), 1)
            same = same_predictions(task, read_submission(task, saved.test_csv, "test"), again)
        except SubmissionError as exc:
            return unsaved(f"{where}: {exc}")
        if not same:
            return unsaved(f"{where}: restoring its fits changed its test predictions (a "
                           "step outside the fits is random)")
    states = [saved.fitted or b"" for saved in fits]
    fit_seconds = sum(saved.seconds for saved in fits)
    replay_seconds = sum(replayed.seconds for replayed in replays)
    holdout = folds is None or folds.k == HOLDOUT
    record = {"saved": True, "node_id": node_id, "models": len(states),
              "form": "fitted model" if models else "replay",
              "training": (f"{rows} of the train + valid rows" if rows is not None else
                           "every train + valid row") if holdout else
                          f"the learn rows of each of {len(states)} folds",
              "train_rows": rows,
              "bytes": sum(len(s) for s in states), "fit_seconds": round(fit_seconds, 2),
              "replay_seconds": round(replay_seconds, 2)}
    return FittedAnswer(record, states, tests)


# A compose run's answer is one file, read up to the sandbox's SUBMISSION_CAP: a run gets as many
# folds as keep their kept models under this share of it. Measured:
# benchmarks/results/budget-end-2026-11-27.
COMPOSE_SHARE_OF_CAP = 0.9


def compose_runs(member_bytes: Sequence[Sequence[int]],
                 cap: int = SUBMISSION_CAP) -> list[list[int]] | None:
    """The folds each compose run puts together, consecutive and in order, given the bytes of
    each member's kept models in fold order (`member_bytes[j][i]`: member j's model of fold
    i): as many folds to a run as keep every member's models of them under
    COMPOSE_SHARE_OF_CAP of `cap`; None when one fold alone does not, or the members do not
    have the same folds."""
    if len({len(member) for member in member_bytes}) != 1:
        return None
    limit = COMPOSE_SHARE_OF_CAP * cap
    runs: list[list[int]] = []
    held = 0
    for fold, size in enumerate(map(sum, zip(*member_bytes, strict=True))):
        if size > limit:
            return None
        if not runs or held + size > limit:
            runs.append([])
            held = 0
        runs[-1].append(fold)
        held += size
    return runs


def compose_answer(task: PreparedTask, node_id: str, code: str, members: list[list[bytes]],
                   member_tests: list[bytes], run_all: BatchRunner,
                   limits: Limits, cap: int = SUBMISSION_CAP) -> FittedAnswer | None:
    """The answer's saved model put together from the fold models its scoring runs kept
    (`members[j][i]`: member j's model of fold i; a single node is its own one member): sandbox
    runs side by side (`compose_runs`: one unless the models outgrow what one run may hand
    back, `cap`) that predict the test rows with every kept model and, for an ensemble, join
    the members fold by fold. Kept only if each member's fold models, combined as scoring
    combined them, give that member's kept test predictions (`member_tests[j]`); None when
    they do not, or a run fails: the answer is then fitted again."""
    folds = len(members[0])
    runs = compose_runs([[len(state) for state in kept] for kept in members], cap)
    if runs is None:
        return None
    test_csv = task.inputs()["test.csv"]
    results = run_all([(fitted_wrapper(COMPOSE), {
        SOLUTION_FILE: code.encode("utf-8"), "test.csv": test_csv,
        **{f"{KEPT_PREFIX}-{member}-{index}.pkl": kept[fold]
           for member, kept in enumerate(members) for index, fold in enumerate(run)}},
        limits) for run in runs])
    states: list[bytes] = []
    member_blocks: list[list[pd.DataFrame]] = [[] for _ in members]
    try:
        for run, result in zip(runs, results, strict=True):
            composed = fold_states(result.fitted)
            if result.status != "ok" or composed is None or len(composed) != len(run):
                return None
            states += composed
            # blocks member by member, each member's folds in order
            blocks = read_stacked(task, result.test_csv, "test", len(task.test_X),
                                  len(run) * len(members))
            for member, kept_blocks in enumerate(member_blocks):
                kept_blocks += blocks[member * len(run):(member + 1) * len(run)]
        for blocks, kept in zip(member_blocks, member_tests, strict=True):
            combined = combine_predictions(task, blocks)
            if not same_predictions(task, read_submission(task, frame_csv(task, combined),
                                                          "test"),
                                    read_submission(task, kept, "test")):
                return None
    except SubmissionError:
        return None
    record = {"saved": True, "node_id": node_id, "models": folds, "form": "fitted model",
              "training": f"the learn rows of each of {folds} folds",
              "from": "the fold models its scoring kept", "bytes": sum(map(len, states)),
              "fit_seconds": 0.0, "replay_seconds": 0.0, "compose_runs": len(runs),
              "compose_seconds": round(sum(result.seconds for result in results), 2)}
    return FittedAnswer(record, states)


def answer_members(node: Node) -> list[str]:
    """The nodes whose kept fold models make `node`'s saved model: an ensemble's members
    (when every member is make_model() code, as its own code then is), else the node itself;
    empty when the node cannot be put together so (an ensemble with LLM-written members)."""
    if not node.operator.traits.combines:
        return [node.node_id]
    return weighted_members(node) if defines_make_model(node.code) else []


def answer_candidates(journal: Journal) -> set[str]:
    """The nodes whose kept fold models may still make the answer's saved model: the best
    eligible nodes (what the final selection chooses among), the members of the ensembles
    among them, and the nodes a later ensemble chooses among (search/floor.py)."""
    top = sorted(journal.eligible_nodes, key=lambda n: (-(n.metric or 0.0), n.step))
    keep = {n.node_id for n in ensemble_candidates(journal)}
    for node in top[:ANSWER_CANDIDATES]:
        keep.add(node.node_id)
        keep.update(answer_members(node))
    return keep


def keep(best_dir: Path, fitted: FittedAnswer) -> None:
    """Write a saved answer's fits to best/model/, whole or not at all (after best/ itself,
    which is replaced whenever the best changes)."""
    if not fitted.record.get("saved"):
        return
    with replacing_dir(best_dir / MODEL_DIR) as staging:
        for index, state in enumerate(fitted.states):
            (staging / f"fold-{index}.pkl").write_bytes(state)
        (staging / INFO_FILE).write_text(json.dumps(fitted.record, indent=2) + "\n")


def saved_states(best_dir: Path) -> list[bytes] | None:
    """The saved fits of the answer now in `best_dir`, one per training set, or None when
    there are none (or they belong to another node: a resumed run that moved on)."""
    folder = best_dir / MODEL_DIR
    try:
        info = json.loads((folder / INFO_FILE).read_text())
        node = json.loads((best_dir / "node.json").read_text())
    except (OSError, ValueError):
        return None
    if not info.get("saved") or info.get("node_id") != node.get("node_id"):
        return None
    paths = [folder / f"fold-{i}.pkl" for i in range(int(info.get("models", 0)))]
    if not paths or not all(p.is_file() for p in paths):
        return None
    return [p.read_bytes() for p in paths]


def saved_rows(best_dir: Path) -> int | None:
    """How many train + valid rows the saved answer in `best_dir` learned from, when not every
    one (a sampled search's refit: `training_inputs`); None for every row or no saved answer."""
    try:
        rows = json.loads((best_dir / MODEL_DIR / INFO_FILE).read_text()).get("train_rows")
    except (OSError, ValueError):
        return None
    return None if rows is None else int(rows)


def saved_answer(best_dir: Path, node_id: str) -> FittedAnswer | None:
    """The fits already saved for `node_id` (a resumed run whose answer did not change), so
    they are kept, not fitted and replayed again; None when there are none for it."""
    states = saved_states(best_dir)
    if states is None:
        return None
    info = json.loads((best_dir / MODEL_DIR / INFO_FILE).read_text())
    if info.get("node_id") != node_id:
        return None
    test = best_dir / "submission" / "test.csv"  # a holdout answer's: its refit's
    return FittedAnswer(info, states, [test.read_bytes()] if test.is_file() else [])


def replay_inputs(trains: list[bytes], code: str, states: list[bytes], valid: bytes | None = None,
                  test: bytes | None = None) -> dict[str, bytes]:
    """The input/ folder of one load run (operators/fitted.py) that predicts `valid` and
    `test` (features CSVs; test defaults to valid) with every saved model, or of a serve
    session (no rows: they come with each request): model i learned from `trains[i]` (a
    train.csv) and its fits are `states[i]`."""
    inputs = {SOLUTION_FILE: code.encode("utf-8")}
    if valid is not None:
        inputs |= {"valid.csv": valid, "test.csv": valid if test is None else test}
    for index, (train, state) in enumerate(zip(trains, states, strict=True)):
        inputs[f"train-{index}.csv"] = train
        inputs[f"{FITTED_PREFIX}-{index}.pkl"] = state
    return inputs
