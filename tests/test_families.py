"""Every model family's record (search/families.py) builds, fits and predicts: the engine's
all-folds code of each family, as operators/models.py writes it from the record, run for real
in the sandbox on a tiny frame with a text column, for regression, binary and multiclass tasks.
The portfolio is every record's entries in their places, cheapest first."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from threadpoolctl import threadpool_limits

from operators.context import TaskContext
from operators.harness import assemble
from operators.kinds.cases import StoredCase, case_configuration
from operators.models import model_code
from operators.prepare_source import PREPARE_SOURCE
from operators.retrieval import Case
from sandbox import Limits, run_script
from search.families import (
    EARLY_STOP_ROWS,
    FAMILIES,
    MIN_TREES_SHARE,
    PORTFOLIO,
    RAISED_SHARE,
    STOPPED_TREES,
    TRIAL_SEED,
    Family,
    Scale,
    Size,
    affordable,
    affordable_space,
    node_seconds,
    sized,
)
from search.floor import Floor, distributions
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal
from tests.helpers import make_node

ROWS = 240
RNG = np.random.default_rng(0)
FRAME = pd.DataFrame({"x": RNG.normal(size=ROWS),
                      "colour": RNG.choice(["red", "blue", "green", None], ROWS),
                      # more levels than the one-hot keeps: CatBoost's categorical feature
                      "town": RNG.choice([f"town {i}" for i in range(40)] + [None], ROWS)})
FRAME.loc[RNG.random(ROWS) < 0.1, "x"] = np.nan  # missing numbers, filled by Encoded
SIGNAL = FRAME["x"].fillna(0) + (FRAME["colour"] == "red")
TASKS = {  # task type: (context, target)
    "regression": (TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                               maximize=False), SIGNAL * 3 + RNG.normal(size=ROWS) * 0.1),
    "binary": (TaskContext(preview="", target="y", task_type="binary", metric="roc_auc",
                           maximize=True, labels=("no", "yes"), needs_proba=True),
               np.where(SIGNAL.median() < SIGNAL, "yes", "no")),
    "multiclass": (TaskContext(preview="", target="y", task_type="multiclass",
                               metric="accuracy", maximize=True, labels=("a", "b", "c")),
                   np.array(["a", "b", "c"])[np.digitize(SIGNAL, SIGNAL.quantile([1 / 3, 2 / 3]))]),
}
FOLDS = np.arange(ROWS) % 3
TEST = pd.DataFrame({"x": [0.5, np.nan, -1.0], "colour": ["red", "purple", None],
                     "town": ["town 1", "new town", None]})


def _params(family: Family) -> dict[str, object]:
    """The family's first portfolio entry, else the low end of each dimension."""
    if family.portfolio:
        return dict(family.portfolio[0].params)
    return {name: low[0] if kind == "categorical" else low
            for name, kind, low, _ in family.space}


def test_the_portfolio_is_every_records_entries_by_place() -> None:
    entries = [(c.place, c.name, f.name) for f in FAMILIES.values() for c in f.portfolio]
    assert len({place for place, _, _ in entries}) == len(entries)  # one entry a place
    assert [(name, family) for _, name, family in sorted(entries)] \
        == [(name, family) for name, family, _ in PORTFOLIO]
    assert len({name for name, _, _ in PORTFOLIO}) == len(PORTFOLIO)  # names run once each
    for family in FAMILIES.values():
        space = distributions(family.space)
        for entry in family.portfolio:
            assert set(entry.params) == set(space), entry.name
        for regression in (True, False):
            model = family.model(regression)
            # a seed is spelled as the gate replaces it, or not at all
            assert model.count(TRIAL_SEED) == family.seeded(regression) \
                and model.count("random_state") == family.seeded(regression), family.name


# A million-row table's search sample (benchmarks.big_data at 5 minutes, 2 executors), and a
# small data set's five folds.
LARGE = Size(100_000, 33_000 + 200_000, 18)
SMALL = Size(800, 200 + 260, 10, fits=5)


def test_a_node_that_fits_its_share_runs_as_it_is_else_with_fewer_trees_or_not_at_all() -> None:
    params = dict(FAMILIES["lgbm"].portfolio[0].params)
    full = node_seconds("lgbm", params, LARGE)
    assert full > node_seconds("lgbm", params, SMALL), "more rows cost more"
    forest = dict(FAMILIES["extra_trees"].portfolio[0].params)
    as_it_is = node_seconds("extra_trees", forest, LARGE) + 1
    assert sized("extra_trees", forest, Scale(LARGE, as_it_is)) == forest
    roomy = sized("lgbm", params, Scale(LARGE, full + 1))  # it stops early: a few trees more
    assert roomy is not None and roomy["n_estimators"] >= params["n_estimators"]
    assert sized("lgbm", params, None) == params
    half = sized("lgbm", params, Scale(LARGE, full / 2))
    assert half is not None and half["n_estimators"] < params["n_estimators"]
    assert node_seconds("lgbm", half, LARGE) <= full / 2
    assert {k: v for k, v in half.items() if k != "n_estimators"} == {
        k: v for k, v in params.items() if k != "n_estimators"}
    fewest = node_seconds("lgbm", {**params, "n_estimators": MIN_TREES_SHARE * params[
        "n_estimators"]}, LARGE)
    assert sized("lgbm", params, Scale(LARGE, fewest * 0.9)) is None
    knn = FAMILIES["knn"].portfolio[0].params  # nothing to size down by
    assert sized("knn", knn, Scale(LARGE, node_seconds("knn", knn, LARGE) * 0.9)) is None
    assert not affordable("knn", Scale(LARGE, node_seconds("knn", knn, LARGE) * 0.9))


def test_a_tuned_familys_space_holds_the_trees_that_fit() -> None:
    scale = Scale(LARGE, node_seconds("lgbm", FAMILIES["lgbm"].portfolio[0].params, LARGE))
    (low, high), = [(lo, hi) for name, _, lo, hi in affordable_space("lgbm", scale)
                    if name == "n_estimators"]
    (_, top), = [(lo, hi) for name, _, lo, hi in FAMILIES["lgbm"].space if name == "n_estimators"]
    assert low <= high < top
    assert affordable_space("lgbm", None) == FAMILIES["lgbm"].space
    assert affordable_space("linear", scale) == FAMILIES["linear"].space


def test_small_data_runs_every_portfolio_entry_as_it_is() -> None:
    """The default run (10 minutes, one executor) sizes nothing on a small data set: the
    limit is for large data alone."""
    scale = Scale(SMALL, 600 / 20)
    for _, family, params in PORTFOLIO:
        assert sized(family, params, scale) == params, family


def test_a_booster_that_stops_early_on_large_data_gets_the_trees_its_share_affords() -> None:
    """On EARLY_STOP_ROWS learning rows or more a gradient booster's trees are a cap (its fit
    stops early): raised to what RAISED_SHARE of the share affords, at most STOPPED_TREES; never
    lowered below its own where they fit. A forest, and any family on fewer rows, runs as it
    is."""
    assert LARGE.learn >= EARLY_STOP_ROWS > SMALL.learn
    lgbm = dict(FAMILIES["lgbm"].portfolio[0].params)
    roomy = Scale(LARGE, 10 * node_seconds("lgbm", {**lgbm, "n_estimators": STOPPED_TREES},
                                           LARGE))
    assert sized("lgbm", lgbm, roomy) == {**lgbm, "n_estimators": STOPPED_TREES}
    # half a share affords twice its trees: raised to about that
    tight = Scale(LARGE, node_seconds("lgbm", {**lgbm, "n_estimators": 2 * lgbm["n_estimators"]},
                                      LARGE) / RAISED_SHARE)
    raised = sized("lgbm", lgbm, tight)
    assert raised is not None
    assert 1.9 * lgbm["n_estimators"] <= raised["n_estimators"] <= 2 * lgbm["n_estimators"]
    for family in ("hist_gb", "catboost"):
        params = dict(FAMILIES[family].portfolio[0].params)
        trees = FAMILIES[family].trees
        assert trees is not None and FAMILIES[family].stops
        assert sized(family, params, Scale(LARGE, 1e6)) == {**params, trees: STOPPED_TREES}
    forest = dict(FAMILIES["extra_trees"].portfolio[0].params)
    assert not FAMILIES["extra_trees"].stops
    assert sized("extra_trees", forest, Scale(LARGE, 1e6)) == forest
    assert sized("lgbm", lgbm, Scale(SMALL, 1e6)) == lgbm  # too few rows to hold some back
    assert sized("lgbm", {**lgbm, "n_estimators": 3000}, Scale(LARGE, 1e6))["n_estimators"] \
        == 3000  # type: ignore[index]


def test_the_floor_runs_the_portfolio_sized_to_the_run() -> None:
    """On a large sample with a tight share, the floor skips what cannot fit (nearest
    neighbours), sizes down what can, and keeps asking Optuna for affordable trials."""
    lgbm = node_seconds("lgbm", FAMILIES["lgbm"].portfolio[0].params, LARGE)
    floor = Floor(0, scale=Scale(LARGE, lgbm * 0.8))
    journal = Journal([make_node("root", operator=Operator.DRAFT, metric=0.5)])
    seen = []
    while (proposal := floor.propose(journal, {}, executor_free=True)) is not None:
        if proposal.operator is not Operator.PORTFOLIO:
            break
        seen.append(proposal)
        assert node_seconds(proposal.family, proposal.param_dict, LARGE) <= lgbm * 0.8
    assert "knn" not in {p.family for p in seen}
    assert any(p.param_dict != dict(next(c.params for c in FAMILIES[p.family].portfolio
                                         if c.name == p.idea)) for p in seen), "sized down"
    assert proposal is not None and proposal.operator is Operator.TUNE
    assert node_seconds(proposal.family, proposal.param_dict, LARGE) <= lgbm * 0.8


def _run_in_process(ctx: TaskContext, name: str, train: pd.DataFrame, y: np.ndarray,
                    held: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The family's model part, as the harness writes it, run beside the harness's `Encoded`:
    its `fit_predict` on `train`, predicting `held` and the test rows."""
    scope: dict[str, Any] = {"np": np, "pd": pd, "re": re, "__name__": "family_code"}
    exec(compile(PREPARE_SOURCE, "<harness prepare>", "exec"), scope)
    exec(compile(model_code(ctx, name, _params(FAMILIES[name])), name, "exec"), scope)
    valid, test = scope["fit_predict"](train, pd.Series(y), held, TEST.copy())
    return np.asarray(valid), np.asarray(test)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_fits_and_predicts_every_task_type(name: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # where a library would write its training logs
    monkeypatch.setenv("LOKY_MAX_CPU_COUNT", "1")  # one thread, as in the sandbox
    learn = FOLDS != 0
    for task_type, (ctx, y) in TASKS.items():
        with threadpool_limits(1):
            valid, test = _run_in_process(ctx, name, FRAME[learn], y[learn], FRAME[~learn])
        assert len(valid) == (~learn).sum() and len(test) == len(TEST), task_type
        if task_type == "regression":
            assert np.corrcoef(valid, y[~learn])[0, 1] > 0.5, name  # it learned something
        elif ctx.needs_proba:
            assert valid.shape == (len(valid), len(ctx.labels)), task_type
            assert np.allclose(valid.sum(axis=1), 1.0) and np.allclose(test.sum(axis=1), 1.0)
            labels = np.asarray(ctx.labels)[valid.argmax(axis=1)]
            assert (labels == y[~learn]).mean() > 0.6, name
        else:  # labels; CatBoost's come as one column, which the harness reads as they
            labels = valid.reshape(len(valid), -1)[:, 0].astype(str)
            assert set(labels) <= set(ctx.labels), task_type
            assert (labels == y[~learn]).mean() > 0.5, name
    assert not any(tmp_path.iterdir())  # nothing written beside the run


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_familys_all_folds_code_runs_in_the_sandbox(name: str, tmp_path: Path) -> None:
    """The whole script the engine runs for a portfolio entry or a trial: every fold, the
    harness's files, the fold models pickled for the answer, no file but its own."""
    ctx, y = TASKS["binary"]
    code = assemble(ctx, model_code(ctx, name, _params(FAMILIES[name])), all_folds=True)
    inputs = {"train.csv": FRAME.assign(y=y).to_csv(index=False).encode(),
              "folds.csv": pd.DataFrame({"fold": FOLDS}).to_csv(index=False).encode(),
              "test.csv": TEST.to_csv(index=False).encode()}
    result = run_script(code, inputs, Limits(wall_seconds=120), workdir_root=tmp_path,
                        keep_workdir=True)
    assert result.status == "ok", result.stderr_tail
    assert result.valid_csv is not None and result.test_csv is not None
    valid = pd.read_csv(io.BytesIO(result.valid_csv))
    assert len(valid) == ROWS and len(pd.read_csv(io.BytesIO(result.test_csv))) == 3 * len(TEST)
    assert np.allclose(valid.filter(like="proba").to_numpy().sum(axis=1), 1.0, atol=1e-6)
    assert result.fitted is not None  # the fold models pickle, kept for the answer
    workdir, = tmp_path.iterdir()
    assert {p.name for p in workdir.iterdir()} == {"input", "submission", "solution.py"}


def _lgbm_case(regression: bool, trees: int) -> str:
    """A stored case in the engine's earlier form (most shipped cases): LightGBM, `trees`."""
    params = {**FAMILIES["lgbm"].portfolio[0].params, "n_estimators": trees}
    model = FAMILIES["lgbm"].model(regression)
    call = "predict" if regression else "predict_proba"
    return (f"import lightgbm as lgb\n\nPARAMS = {params!r}\n\n\n"
            "def fit_predict(X, y, X_valid, X_test):\n"
            "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
            f"    model = {model}\n"
            "    model.fit(X, y)\n"
            f"    return model.{call}(X_valid), model.{call}(X_test)\n")


@pytest.mark.parametrize("task_type", sorted(TASKS))
def test_a_case_in_a_familys_form_is_that_familys_configuration(task_type: str) -> None:
    ctx, _ = TASKS[task_type]
    for name, family in FAMILIES.items():
        params = _params(family)
        assert case_configuration(ctx, model_code(ctx, name, params)) == (name, params), name
    # The earlier form; a classifier's with probabilities, for the multiclass label metric too.
    found = case_configuration(ctx, _lgbm_case(task_type == "regression", 577))
    assert found is not None and found[0] == "lgbm" and found[1]["n_estimators"] == 577
    params = _params(FAMILIES["lgbm"])
    written = model_code(ctx, "lgbm", params)
    # Code of its own (a step more than the family's), or a PARAMS the cost cannot read: none.
    assert case_configuration(ctx, written.replace(
        "return Encoded(", "X = 1\n    return Encoded(")) is None
    assert case_configuration(ctx, model_code(ctx, "lgbm", {
        k: v for k, v in params.items() if k != "num_leaves"})) is None


def test_the_floor_sizes_a_case_as_its_portfolio_and_the_step_runs_it_so() -> None:
    """A LightGBM case of 577 trees (one timed out at 120 s on a 2 GB table) runs with the
    trees its share affords, is left out where even a fifth of them would not fit, and runs as
    stored on small data."""
    ctx, _ = TASKS["regression"]
    code = _lgbm_case(True, 577)
    configuration = case_configuration(ctx, code)
    assert configuration is not None
    family, params = configuration
    share = node_seconds(family, params, LARGE) / 3

    def first(scale: Scale | None) -> Proposal | None:
        floor = Floor(0, cases=("c1", "c2"), configurations={"c1": configuration},
                      scale=scale, portfolio=False, tuning=False, ensembles=False)
        return floor.propose(Journal(), {}, executor_free=True)

    sized_down = first(Scale(LARGE, share))
    assert sized_down is not None and sized_down.operator is Operator.CASE
    assert sized_down.idea == "c1"
    (key, trees), = sized_down.params
    assert key == "n_estimators" and MIN_TREES_SHARE * 577 <= trees < 577
    assert node_seconds(family, {**params, key: trees}, LARGE) <= share
    # Left out where too slow, and so not among the cases it runs (a recall waits for those);
    # a case of unknown cost (c2: no family's) runs as stored.
    tight = Floor(0, cases=("c1", "c2"), configurations={"c1": configuration},
                  scale=Scale(LARGE, share / 10))
    assert tight.cases == ("c2",)
    only = tight.propose(Journal(), {}, executor_free=True)
    assert only is not None and only.idea == "c2" and only.params == ()
    as_stored = first(Scale(SMALL, 600 / 20))
    assert as_stored is not None and as_stored.params == ()
    case = Case("c1", "f", "big.csv", "regression", {}, "tune", "rmse", 0.2, code)
    run = StoredCase().engine_code(replace(ctx, cases=(case,)), sized_down, Journal())
    assert f"'n_estimators': {trees}," in run.code and "'n_estimators': 577" not in run.code
    assert f"sized to this run: n_estimators={trees}" in run.plan
