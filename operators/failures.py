"""What the model is shown about a failure: the failed code, its error, the traceback's end, and
hints for the API drift and slips a small model makes most (seed 002, issue 10), keyed by a
marker in the error. Shared by the debug, reflect and analysis-retry prompts.
"""

from __future__ import annotations

from operators.harness import model_part
from operators.replies import tail_lines
from search.journal import Journal

_NOT_A_FRAME = (
    "After a scikit-learn transformer (OneHotEncoder, StandardScaler, SimpleImputer, ...) the data "
    "is a numpy array or sparse matrix, not a DataFrame. Use `X, X_valid, X_test = prepare(X, "
    "X_valid, X_test)` instead (it already one-hot encodes and fills missing values), and do "
    "any pandas work before it.")
_NO_LABELS = (
    "X_valid and X_test come without labels (the engine scores them on hidden labels): delete "
    "every metric computation and return the predictions.")

# Seed 002 / issue 10: API drift that small models trip over, keyed by a marker in the error.
API_HINTS = (
    ("squared", "In scikit-learn >= 1.6 `mean_squared_error` has no `squared=` argument: "
     "use `sklearn.metrics.root_mean_squared_error(y, p)` or `np.sqrt(mean_squared_error(y, p))`; "
     "better, compute no metric at all: the engine scores the predictions."),
    ("early_stopping_rounds", "In lightgbm >= 4 `fit()` takes no `early_stopping_rounds` or "
     "`verbose`: pass `callbacks=[lightgbm.early_stopping(50), lightgbm.log_evaluation(0)]`."),
    ("verbose", "In lightgbm >= 4 `fit()` takes no `verbose=`: drop it or use "
     "`callbacks=[lightgbm.log_evaluation(0)]`."),
    ("sparse", "In scikit-learn >= 1.2 OneHotEncoder uses `sparse_output=` instead of `sparse=`."),
    ("could not convert string to float", "Some columns are text: one-hot encode them with "
     "`pd.get_dummies` on train+valid+test together, or drop them."),
    ("Unknown label type", "The target is continuous: use a regressor, not a classifier."),
    ("append", "`DataFrame.append` was removed in pandas 2: use `pd.concat([a, b])`."),
    ("HistGradientBoosting", "HistGradientBoosting models take `max_iter`, not `n_estimators`."),
    ("non-iterable NoneType", "fit_predict must end with `return valid_pred, test_pred`."),
    ("feature names should match", "Transform X_valid and X_test exactly like X: call "
     "`X, X_valid, X_test = prepare(X, X_valid, X_test)` after your feature engineering."),
    ("number of features in data", "Transform X_valid and X_test exactly like X: call "
     "`X, X_valid, X_test = prepare(X, X_valid, X_test)` after your feature engineering."),
    ("unknown categories", "Use `prepare(X, X_valid, X_test)` instead of a OneHotEncoder, or "
     "pass `handle_unknown='ignore'`."),
    ("at least one dataset", "lightgbm early stopping needs `eval_set=[(X_val, y_val)]` in "
     "fit(); or drop the early_stopping callback."),
    ("cannot import name 'HistGradientBoosting", "HistGradientBoosting models live in "
     "scikit-learn: `from sklearn.ensemble import HistGradientBoostingRegressor`."),
    ("cannot import name", "That name does not exist in the installed version: import it from "
     "the right module or use another approach."),
    ("is not defined", "Define or import every name you use inside the model code."),
    # Failures measured in lite-suite runs (2026-11-24) that the hints above missed.
    *((marker, _NOT_A_FRAME) for marker in (
        "'numpy.ndarray' object has no attribute", "'csr_matrix' object has no attribute",
        "cannot concatenate object of type '<class 'scipy.sparse",
        "cannot concatenate object of type '<class 'numpy.ndarray")),
    *((f"name '{name}' is not defined", _NO_LABELS) for name in (
        "y_valid", "y_val", "y_test", "y_true")),
    ("def prepare(", "`prepare` is already defined by the engine: call it, and never define a "
     "function named `prepare` yourself."),
    ("'ellipsis' object is not callable", "`...` in the example stands for a model class: "
     "write one, e.g. `model = lgb.LGBMRegressor(**PARAMS)`."),
    ("argument after ** must be a mapping", "PARAMS must be a dict of the model's "
     "hyperparameters, e.g. `PARAMS = {\"n_estimators\": 300}`."),
    ("got an unexpected keyword argument", "A key of PARAMS is not a parameter of the model: "
     "keep only the ones its class takes."),
    ("Parameter grid for parameter", "Every value of a GridSearchCV param_grid must be a list "
     "(`{'max_depth': [3, 5]}`); fixed settings go into the estimator itself."),
)


def api_hints(error_text: str) -> list[str]:
    """The hints whose marker is in the error, each once, in API_HINTS order."""
    return list(dict.fromkeys(hint for marker, hint in API_HINTS if marker in error_text))


def code_block(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def failure_section(journal: Journal, parent_id: str, what: str = "Model code") -> str:
    """The debug context: the failed code, its error, the traceback's end and API hints."""
    parent = journal.get(parent_id)
    error = parent.error or f"status {parent.status.value}"
    trace = tail_lines(parent.stderr_tail, 12)
    hints = api_hints(error + "\n" + parent.stderr_tail)
    return (
        f"# {what} that failed\n{code_block(model_part(parent.code))}\n\n"
        f"# Error\n{error}\n"
        + (f"```\n{trace}\n```\n" if trace and trace not in error else "")
        + "".join(f"Hint: {h}\n" for h in hints)
    )
