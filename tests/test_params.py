"""PARAMS dicts in model code: read literally, rewritten in place, anything else left alone."""

from __future__ import annotations

from operators.params import read_params, with_params

CODE = '''import lightgbm as lgb

PARAMS = {"n_estimators": 300,
          "learning_rate": 0.05, "objective": "regression"}


def fit_predict(X, y, X_valid, X_test):
    model = lgb.LGBMRegressor(**PARAMS)
    return model.fit(X, y).predict(X_valid), model.predict(X_test)
'''


def test_read_and_rewrite() -> None:
    assert read_params(CODE) == {"n_estimators": 300, "learning_rate": 0.05,
                                 "objective": "regression"}
    tuned = with_params(CODE, {"n_estimators": 120, "learning_rate": 0.2})
    assert read_params(tuned) == {"n_estimators": 120, "learning_rate": 0.2,
                                  "objective": "regression"}
    assert tuned.startswith("import lightgbm as lgb\n\nPARAMS = {")
    assert tuned.endswith(CODE.split("}\n", 1)[1])  # everything after the dict unchanged


def test_no_literal_params_no_change() -> None:
    for code in ("x = 1\n", "PARAMS = dict(a=1)\n", "PARAMS = {'a': [1, 2]}\n",
                 "def f(:\n", "PARAMS = {1: 2}\n"):
        assert read_params(code) is None
        assert with_params(code, {"a": 2}) == code
