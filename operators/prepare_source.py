"""The harness's feature preparation as source text (`PREPARE_SOURCE`): the `Encoded` model
step (text columns one-hot or native, numbers filled, the kept feature programs applied, its
gradient boosting stopped early on large data: `fit_stopping_early`), and `prepare` and
`apply_programs`. The harness writes it into every engine-written script, and a
saved model's module holds it, so a candidate, a served answer and the non-LLM benchmark
baselines see the same features.
"""

from __future__ import annotations

from search.families import EARLY_STOP_ROUNDS, EARLY_STOP_ROWS, EARLY_STOP_SHARE

# The harness's feature preparation; the non-LLM benchmark baselines exec it in-process, so they
# see exactly the features every candidate gets from `prepare()`.
PREPARE_SOURCE = '''class Encoded:
    """The harness's features as a model step. `fit` learns from the training rows alone which
    columns are text, their common values and the fill of missing values; `transform`
    encodes any rows the same way (one-hot text, numbers, identical column names), so the
    columns never depend on the rows predicted. A model whose `fit` takes `cat_features`
    (CatBoost's ordered target statistics) gets a text column with more levels than the one-hot
    keeps as it is, as strings. With a `model`, `predict` and `predict_proba` are the model's
    on the encoded rows; with `programs` (kept feature programs, operators/features.py), they
    are applied first."""

    def __init__(self, model=None, programs=(), max_levels=20):
        self.model, self.programs, self.max_levels = model, list(programs), max_levels

    def fit(self, X, y=None):
        import inspect

        X = apply_programs(X, self.programs)
        self.columns_ = list(X.columns)
        text = list(X.select_dtypes(exclude="number").columns)
        native = self.model is not None and "cat_features" in inspect.signature(
            self.model.fit).parameters
        # One-hot where it keeps every level: on credit-g (13 text columns of at most 10 levels)
        # CatBoost took 5 times as long with them as categorical features, for the same AUC.
        self.text_ = [c for c in text if X[c].nunique() > self.max_levels] if native else []
        self.levels_ = {}
        for col in text:  # ids and free text would explode the one-hot
            if col not in self.text_:
                self.levels_[col] = [v for v in X[col].value_counts().index[:self.max_levels]
                                     if v != "other"] + ["other"]
        frame = self._one_hot(X)
        # A column without a median (never filled in training) is filled with 0.
        self.fill_ = np.nan_to_num(frame.drop(columns=self.text_).median().to_numpy(
            dtype=float), nan=0.0)
        names, seen = [], set()
        for col in frame.columns:  # lightgbm rejects some characters in feature names
            name = re.sub(r"[^0-9A-Za-z_]", "_", str(col))
            while name in seen:
                name += "_"
            seen.add(name)
            names.append(name)
        self.names_ = names
        if self.model is not None:
            params = self.model.get_params() if hasattr(self.model, "get_params") else {}
            for key, value in params.items():  # no more neighbours than training rows
                if key.split("__")[-1] == "n_neighbors" and isinstance(value, int):
                    self.model.set_params(**{key: min(value, len(X))})
            cats = {"cat_features": [n for n, c in zip(names, frame.columns) if c in self.text_]}
            fit_stopping_early(self.model, self._finish(frame), y, **(cats if native else {}))
        return self

    def _one_hot(self, X):
        frame = X.reindex(columns=self.columns_)
        kinds = frame.dtypes  # once: a column lookup costs as much as one row's prediction
        text = getattr(self, "text_", ())  # none in a model saved before text_ existed
        for col in self.columns_:
            if col in text:  # as strings, a missing one "nan"
                frame[col] = frame[col].astype(str).where(frame[col].notna(), "nan")
            elif col in self.levels_:  # missing: a column of its own
                known = frame[col].isin(self.levels_[col]) | frame[col].isna()
                frame[col] = pd.Categorical(frame[col].where(known, "other"),
                                            categories=self.levels_[col])
            elif not pd.api.types.is_numeric_dtype(kinds[col]):
                frame[col] = pd.to_numeric(frame[col], errors="coerce")
        if not self.levels_:
            return frame
        return pd.get_dummies(frame, columns=list(self.levels_), dummy_na=True, dtype=float)

    def _arrays(self, X):
        # `_one_hot`'s values as arrays, column for column: pandas' Categorical and get_dummies
        # took 34 of a one-row call's 50 ms on credit-g's 13 text columns, and a reindexed
        # frame's selections 3.5 ms a call on california-housing's 8 columns (benchmarks/
        # results/latency-ensemble-2026-12-07), so each column is read once as an array.
        # Numbers first, then each text column's levels and its missing-value column, as
        # get_dummies orders them; a column absent from X is missing on every row.
        if (not self.levels_ and list(X.columns) == self.columns_
                and all(pd.api.types.is_numeric_dtype(kind) for kind in X.dtypes)):
            # numbers only, as trained: one copy (a column at a time cost kc1's 21 columns
            # 0.2 ms a fold model)
            return X.to_numpy(dtype=float, na_value=np.nan)
        numbers = [col for col in self.columns_ if col not in self.levels_]
        out = np.full((len(X), len(numbers)), np.nan)
        for j, col in enumerate(numbers):
            if col in X.columns:
                values = X[col]
                if not pd.api.types.is_numeric_dtype(values.dtype):  # numbers written as text
                    values = pd.to_numeric(values, errors="coerce")
                out[:, j] = values.to_numpy(dtype=float, na_value=np.nan)
        if not self.levels_:
            return out
        blocks = [out]
        rows = np.arange(len(X))
        for col, levels in self.levels_.items():  # the last level is "other", for one unseen
            texts = (X[col].to_numpy(dtype=object) if col in X.columns
                     else np.full(len(X), None, dtype=object))
            index = {level: i for i, level in enumerate(levels)}
            codes = np.fromiter((index.get(v, len(levels) - 1) for v in texts), int, len(texts))
            codes[pd.isna(texts)] = len(levels)
            block = np.zeros((len(X), len(levels) + 1))
            block[rows, codes] = 1.0
            blocks.append(block)
        return np.hstack(blocks)

    def _filled(self, frame):
        values = (frame if isinstance(frame, np.ndarray)
                  else frame.to_numpy(dtype=float, na_value=np.nan))
        return np.where(np.isnan(values), self.fill_, values)

    def _finish(self, frame):
        text = getattr(self, "text_", ())
        if not text:
            return pd.DataFrame(self._filled(frame), index=frame.index, columns=self.names_)
        numbers = [col for col in frame.columns if col not in text]
        out = frame.copy()
        out[numbers] = self._filled(frame[numbers])
        out.columns = self.names_
        return out

    def _encoded(self, X):
        return self._one_hot(apply_programs(X, self.programs))

    def transform(self, X):
        if getattr(self, "text_", ()):  # text kept as text: the frame's own way
            return self._finish(self._encoded(X))
        frame = apply_programs(X, self.programs)
        return pd.DataFrame(self._filled(self._arrays(frame)), index=frame.index,
                            columns=self.names_)

    def _matrix(self, X):  # transform's values without their frame, for a booster
        if getattr(self, "text_", ()):
            return self._filled(self._encoded(X))
        return self._filled(self._arrays(apply_programs(X, self.programs)))

    def _booster(self):
        # A fitted LightGBM scikit-learn model predicts through its booster, as its own
        # predict does after reading back every parameter (get_params, deepcopy: about 1 ms a
        # call, more than a one-row request's trees); a custom objective keeps its own path.
        if type(self.model).__module__.split(".")[0] != "lightgbm":
            return None
        if callable(getattr(self.model, "objective_", None)):
            return None
        return getattr(self.model, "booster_", None)

    def _trees(self):
        # A fitted scikit-learn forest predicts through its trees' arrays, summed in its order
        # as its own predict sums them (the same floats): that predict hands each tree to
        # joblib, 31 ms for one row through 300 trees against 1.5 ms (under load, one thread).
        if not type(self.model).__module__.startswith("sklearn.ensemble._forest"):
            return None
        if getattr(self.model, "n_outputs_", None) != 1:
            return None
        return [tree.tree_ for tree in getattr(self.model, "estimators_", ())] or None

    def _forest(self, trees, X):  # the forest's mean of its trees' values, as its predict
        matrix = np.ascontiguousarray(self._matrix(X), dtype=np.float32)
        classes = getattr(self.model, "n_classes_", None)
        out = np.zeros((len(matrix), classes) if classes else len(matrix))
        for tree in trees:
            out += tree.predict(matrix)[:, :classes] if classes else tree.predict(matrix)[:, 0]
        return out / len(trees)

    def _features(self, X):
        # CatBoost predicts a matrix as it predicts the frame, without making a Pool of a frame:
        # 0.2 against 0.45 ms a one-row call (a frame only for the text columns it takes).
        plain = (type(self.model).__module__.split(".")[0] == "catboost"
                 and not getattr(self, "text_", ()))
        return self._matrix(X) if plain else self.transform(X)

    def predict(self, X):
        booster, trees = self._booster(), self._trees()
        if trees is not None and not hasattr(self.model, "classes_"):
            return self._forest(trees, X)
        if booster is None and trees is None:
            return self.model.predict(self._features(X))
        if not hasattr(self.model, "classes_"):
            return booster.predict(self._matrix(X))
        return np.asarray(self.model.classes_)[self.predict_proba(X).argmax(axis=1)]

    def predict_proba(self, X):
        trees = self._trees()
        if trees is not None:
            return self._forest(trees, X)
        booster = self._booster()
        if booster is None:
            return self.model.predict_proba(self._features(X))
        proba = booster.predict(self._matrix(X))
        return proba if proba.ndim == 2 else np.column_stack([1.0 - proba, proba])


def fit_stopping_early(model, X, y, **extra):
    """`model.fit(X, y)`; a LightGBM or CatBoost model on __ROWS__ rows or more learns from all
    but a seeded __SHARE__ of them and stops adding trees once the held-back rows have not
    gained in __ROUNDS__ (its trees are a cap; scikit-learn's histogram boosting stops so by
    itself above 10,000 rows). A classifier whose learning rows would miss a class learns from
    every row."""
    library = type(model).__module__.split(".")[0]
    if len(X) < __ROWS__ or library not in ("lightgbm", "catboost"):
        return model.fit(X, y, **extra)
    labels = np.asarray(y)
    held = np.zeros(len(X), dtype=bool)
    held[np.random.default_rng(0).permutation(len(X))[:int(len(X) * __SHARE__)]] = True
    if "Classifier" in type(model).__name__ and len(np.unique(labels[~held])) < len(
            np.unique(labels)):
        return model.fit(X, y, **extra)
    learn, stop = (X.iloc[~held], labels[~held]), (X.iloc[held], labels[held])
    if library == "catboost":
        return model.fit(*learn, eval_set=stop, early_stopping_rounds=__ROUNDS__, **extra)
    import warnings

    import lightgbm

    with warnings.catch_warnings():  # eval_set, deprecated from LightGBM 4.7 for eval_X and
        warnings.simplefilter("ignore")  # eval_y, whose labels 4.7 does not encode as y's
        return model.fit(*learn, eval_set=[stop],
                         callbacks=[lightgbm.early_stopping(__ROUNDS__, verbose=False)], **extra)


def prepare(X, X_valid, X_test, max_levels=20):
    """One-hot encode text columns and fill missing values the same way for all three
    frames, from the training rows alone (so the columns never depend on the rows
    predicted); returns three numeric DataFrames with identical columns."""
    encoded = Encoded(max_levels=max_levels).fit(X)
    return encoded.transform(X), encoded.transform(X_valid), encoded.transform(X_test)


def apply_programs(frame, programs):
    """`frame` with feature programs (sources defining add_features) applied in order."""
    import datetime
    import math

    for source in programs:
        scope = {"np": np, "pd": pd, "math": math, "re": re, "datetime": datetime}
        exec(compile(source, "feature program", "exec"), scope)
        frame = scope["add_features"](frame.copy())
        if isinstance(frame, pd.DataFrame):
            frame = frame.replace([np.inf, -np.inf], np.nan)
    return frame
'''.replace("__ROWS__", str(EARLY_STOP_ROWS)).replace("__SHARE__", repr(EARLY_STOP_SHARE)).replace(
    "__ROUNDS__", str(EARLY_STOP_ROUNDS))
