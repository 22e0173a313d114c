"""Deterministic import repair of model code."""

from __future__ import annotations

import ast

import pytest

from operators.imports import fix_imports


def test_adds_missing_known_imports() -> None:
    code = "def fit_predict(X, y, X_valid, X_test):\n    m = RandomForestRegressor()\n" \
           "    s = StandardScaler()\n    return m, s\n"
    fixed = fix_imports(code)
    assert "from sklearn.ensemble import RandomForestRegressor" in fixed
    assert "from sklearn.preprocessing import StandardScaler" in fixed
    ast.parse(fixed)


def test_moves_a_name_imported_from_the_wrong_module() -> None:
    code = ("from lightgbm import LGBMRegressor, HistGradientBoostingRegressor as H\n"
            "m = H()\nn = LGBMRegressor()\n")
    fixed = fix_imports(code)
    assert "from lightgbm import LGBMRegressor\n" in fixed
    assert "from sklearn.ensemble import HistGradientBoostingRegressor as H" in fixed
    ast.parse(fixed)


def test_leaves_bound_and_unknown_names_alone() -> None:
    code = ("from sklearn.ensemble import RandomForestRegressor\n"
            "def fit_predict(X, y, X_valid, X_test):\n"
            "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
            "    return RandomForestRegressor(), mystery\n")
    assert fix_imports(code) == code
    assert fix_imports("def f(:\n") == "def f(:\n"


def test_module_aliases() -> None:
    assert fix_imports("a = lgb.LGBMRegressor()\n").startswith("import lightgbm as lgb\n")


def test_engine_metric_names_imported_from_sklearn_are_bound_to_real_functions() -> None:
    code = ("from sklearn.metrics import f1_weighted, rmse, accuracy_score\n"
            "value = (f1_weighted(['a', 'b'], ['a', 'a']), rmse([1.0, 3.0], [1.0, 1.0]),\n"
            "         accuracy_score([1], [1]))\n")
    scope: dict[str, object] = {}
    exec(fix_imports(code), scope)
    assert scope["value"] == (pytest.approx(1 / 3), pytest.approx(2 ** 0.5), 1.0)
