"""The harness's `Encoded` step (operators/harness.py) around a fitted LightGBM model predicts
through the model's booster, skipping the scikit-learn wrapper's per-call parameter handling
(issue 43: about 1 ms of a served one-row request, per fold model), and its predictions and
probabilities are exactly the wrapper's. Other models, and LightGBM with a custom objective,
keep their own predict. A scikit-learn forest predicts through its trees' arrays, summed as its
own predict sums them (issue 77: its joblib dispatch took 31 of 32 ms of a one-row call through
300 trees), with exactly its predictions and probabilities; CatBoost predicts the encoded
matrix, not a frame (0.2 against 0.45 ms a one-row call), with the frame's predictions; the
one-hot is made with arrays, not pandas' get_dummies (34 of 50 ms a one-row call on
credit-g), column for column the same values."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
from catboost import CatBoostClassifier, CatBoostRegressor
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import Ridge

from operators.prepare_source import PREPARE_SOURCE
from search.families import EARLY_STOP_ROUNDS, EARLY_STOP_ROWS

NAMESPACE: dict[str, Any] = {"np": np, "pd": pd, "re": re}
exec(compile(PREPARE_SOURCE, "<harness prepare>", "exec"), NAMESPACE)
Encoded = NAMESPACE["Encoded"]

RNG = np.random.default_rng(0)
ROWS = pd.DataFrame({"a": RNG.normal(size=300), "b": RNG.normal(size=300),
                     "colour": RNG.choice(["red", "blue", None], 300)})
ROWS.loc[RNG.random(300) < 0.1, "a"] = np.nan  # filled by Encoded from the training rows
NEW = ROWS.sample(40, random_state=1)

TARGETS = {
    "regression": (lgb.LGBMRegressor, ROWS.b * 2 + RNG.normal(size=300)),
    "binary text labels": (lgb.LGBMClassifier, np.where(ROWS.b > 0, "yes", "no")),
    "binary 0/1": (lgb.LGBMClassifier, (ROWS.b > 0).astype(int)),
    "multiclass": (lgb.LGBMClassifier, RNG.choice([3, 1, 2], 300)),
}


def _never(*_: object, **__: object) -> None:
    raise AssertionError("the wrapper's predict was called")


@pytest.mark.parametrize("name", list(TARGETS))
def test_lightgbm_predicts_through_its_booster_exactly_as_its_wrapper(name: str) -> None:
    kind, y = TARGETS[name]
    _predicts_as_its_own(kind(n_estimators=30, verbose=-1), y)  # through the booster alone


def _predicts_as_its_own(model: Any, y: Any) -> tuple[Any, np.ndarray]:
    """Asserts that `model` inside Encoded, fitted on ROWS, predicts NEW (and its
    probabilities) bit for bit as the model's own methods, which it may no longer call; the
    Encoded and the own predictions, for more checks."""
    encoded = Encoded(model).fit(ROWS, y)
    features = encoded.transform(NEW)
    expected = model.predict(features)
    proba = model.predict_proba(features) if hasattr(model, "classes_") else None
    model.predict = model.predict_proba = _never
    got = encoded.predict(NEW)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    if proba is not None:
        assert np.array_equal(encoded.predict_proba(NEW), proba)
    return encoded, expected


FORESTS = {
    "random forest, regression": (RandomForestRegressor, "regression"),
    "extra trees, regression": (ExtraTreesRegressor, "regression"),
    "random forest, text labels": (RandomForestClassifier, "binary text labels"),
    "extra trees, multiclass": (ExtraTreesClassifier, "multiclass"),
    "random forest, 0/1": (RandomForestClassifier, "binary 0/1"),
}


@pytest.mark.parametrize("name", list(FORESTS))
def test_a_forest_predicts_through_its_trees_exactly_as_its_own_predict(name: str) -> None:
    kind, target = FORESTS[name]
    encoded, expected = _predicts_as_its_own(  # through the trees alone
        kind(n_estimators=25, min_samples_leaf=3, random_state=0), TARGETS[target][1])
    assert np.array_equal(encoded.predict(NEW.head(1)), expected[:1])  # one row alone


@pytest.mark.parametrize("name", ["regression", "binary text labels", "multiclass"])
def test_catboost_predicts_the_matrix_exactly_as_the_frame(name: str) -> None:
    kind = CatBoostRegressor if name == "regression" else CatBoostClassifier
    model = kind(iterations=20, depth=3, verbose=False, thread_count=1,
                 allow_writing_files=False)
    encoded = Encoded(model).fit(ROWS, TARGETS[name][1])
    frame = encoded.transform(NEW)
    expected = model.predict(frame)
    proba = model.predict_proba(frame) if name != "regression" else None
    seen: list[type] = []
    own = model.predict

    def spy(X: object, *args: object, **kwargs: object) -> object:
        seen.append(type(X))
        return own(X, *args, **kwargs)

    model.predict = spy
    assert np.array_equal(encoded.predict(NEW), expected) and seen == [np.ndarray]
    if proba is not None:
        assert np.array_equal(encoded.predict_proba(NEW), proba)


def test_the_one_hot_as_arrays_is_the_frames_column_for_column() -> None:
    rng = np.random.default_rng(3)
    train = pd.DataFrame({
        "n": rng.normal(size=200), "i": rng.integers(0, 5, 200),
        "city": rng.choice(["Oslo", "Rome", "other", None], 200),
        "flag": rng.choice([True, False], 200),
        "size": rng.choice(["s", "m", "l"], 200).astype(object),
        "ids": [f"id{k}" for k in range(200)],  # more levels than kept: the rest is "other"
        "as_text": rng.choice(["1.5", "2", None], 200),
    })
    train.loc[rng.random(200) < 0.2, "n"] = np.nan
    encoded = Encoded().fit(train)
    new = pd.concat([train.sample(30, random_state=0), pd.DataFrame({
        "n": [np.nan], "i": [9], "city": ["Lima"], "flag": [None], "size": [np.nan],
        "ids": ["never seen"], "as_text": ["x"]})], ignore_index=True)
    new["size"] = new["size"].astype("category")  # a category column predicts the same
    numbers_as_text = new.assign(n=[None if pd.isna(v) else str(v) for v in new["n"]])
    for rows in (new, new.head(1), new.tail(1), new.drop(columns=["city"]), numbers_as_text):
        frame = encoded._one_hot(rows)
        expected = frame.to_numpy(dtype=float, na_value=np.nan)
        assert np.array_equal(encoded._arrays(rows), expected, equal_nan=True)
        assert encoded.transform(rows).equals(encoded._finish(frame))
    assert len(encoded.levels_) == 5  # city, flag, size, ids, as_text: all one-hot

    numbers = train[["n", "i"]].assign(b=rng.normal(size=200))
    encoded = Encoded().fit(numbers)
    new = numbers.head(5).copy()
    new.loc[0, "i"] = np.nan
    as_text = new.assign(b=["1.5", "x", None, "2", "3"])  # a number written as text
    for rows in (new, new[["b", "n", "i"]], new.drop(columns=["i"]), as_text):
        expected = encoded._one_hot(rows).to_numpy(dtype=float, na_value=np.nan)
        assert np.array_equal(encoded._arrays(rows), expected, equal_nan=True)


def test_other_models_and_custom_objectives_keep_their_own_predict() -> None:
    ridge = Encoded(Ridge()).fit(ROWS, TARGETS["regression"][1])
    ridge.model.predict = _never
    with pytest.raises(AssertionError, match="wrapper's predict"):
        ridge.predict(NEW)

    def squared(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return y_pred - y_true, np.ones_like(y_pred)

    custom = Encoded(lgb.LGBMRegressor(objective=squared, n_estimators=5, verbose=-1))
    custom.fit(ROWS, TARGETS["regression"][1])
    custom.model.predict = _never
    with pytest.raises(AssertionError, match="wrapper's predict"):
        custom.predict(NEW)


def test_catboost_gets_a_text_column_with_many_levels_as_a_categorical_feature(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose fit takes `cat_features` (CatBoost) gets a text column with more levels
    than the one-hot keeps as it is, as strings (a missing value "nan"); a text column with
    few levels stays one-hot, as every other model gets both."""
    from catboost import CatBoostRegressor

    monkeypatch.chdir(tmp_path)
    rows = ROWS.assign(town=RNG.choice([f"town {i}" for i in range(40)] + [None], 300))
    y = rows.b + rows.town.str.len().fillna(0)
    model = CatBoostRegressor(iterations=20, verbose=False, allow_writing_files=False)
    encoded = Encoded(model).fit(rows, y)
    assert encoded.text_ == ["town"] and list(encoded.levels_) == ["colour"]
    assert [model.feature_names_[i] for i in model.get_cat_feature_indices()] == ["town"]
    new = pd.DataFrame({"a": [0.1, np.nan], "b": [1.0, 2.0], "colour": ["red", "pink"],
                        "town": ["town 3", None]})  # an unseen level, a missing one
    assert encoded.transform(new)["town"].tolist() == ["town 3", "nan"]
    assert np.isfinite(encoded.predict(new)).all()
    assert not any(tmp_path.iterdir())
    # a model without cat_features gets both one-hot, as before
    ridge = Encoded(Ridge()).fit(rows, y)
    assert ridge.text_ == [] and set(ridge.levels_) == {"colour", "town"}
    # a model saved before text_ existed predicts as it did
    del ridge.text_
    assert np.isfinite(ridge.predict(new)).all()


def _large(rows: int, rare: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"a": rng.normal(size=rows), "b": rng.normal(size=rows),
                          "town": rng.choice([f"t{i}" for i in range(40)], rows)})
    y = np.where(frame["a"] + 0.5 * frame["b"] + rng.normal(size=rows) > 0, "yes", "no")
    # a class of `rare` rows, among those held back for the early stopping (seed 0)
    y = y.astype(object)
    y[np.random.default_rng(0).permutation(rows)[:rare]] = "rare"
    return frame, y


def test_a_booster_on_large_data_stops_early_on_rows_held_back() -> None:
    """From EARLY_STOP_ROWS rows a LightGBM or CatBoost fit holds back a tenth of them and
    stops once they stop gaining (its trees are a cap); below, every tree is fitted."""
    frame, y = _large(EARLY_STOP_ROWS)
    fitted = Encoded(lgb.LGBMClassifier(n_estimators=2000, learning_rate=0.3, verbose=-1))
    fitted.fit(frame, y)
    assert 0 < fitted.model.best_iteration_ < 2000 - EARLY_STOP_ROUNDS
    assert fitted.predict_proba(frame.head(3)).shape == (3, 2)
    cat = Encoded(CatBoostClassifier(iterations=2000, learning_rate=0.3, verbose=False,
                                     allow_writing_files=False)).fit(frame, y)
    assert cat.text_ == ["town"]  # its text column native, stopped all the same
    assert cat.model.tree_count_ < 2000 - EARLY_STOP_ROUNDS
    small = Encoded(lgb.LGBMClassifier(n_estimators=300, learning_rate=0.3, verbose=-1))
    small.fit(frame.head(EARLY_STOP_ROWS - 1), y[:EARLY_STOP_ROWS - 1])
    assert small.model.best_iteration_ == 0 and small.model.n_estimators_ == 300


def test_a_class_the_held_back_rows_would_take_whole_keeps_every_row() -> None:
    frame, y = _large(EARLY_STOP_ROWS, rare=1)  # one row, held back: the learning rows miss it
    fitted = Encoded(lgb.LGBMClassifier(n_estimators=60, verbose=-1)).fit(frame, y)
    assert list(fitted.model.classes_) == ["no", "rare", "yes"]
    assert fitted.model.n_estimators_ == 60
