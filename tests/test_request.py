"""Plain-language tasks: deterministic parsing, ambiguity and mismatch errors, and the LLM step
for what the words leave open (with the scripted LLM, and no LLM at all when none is needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from actors.llm import ScriptedLLM
from common.errors import UserError
from engine.task.request import Request, parse_request
from engine.task.request_llm import llm_prompt, parse_json_reply, resolve_request


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working dir with data/telco.csv (binary Churn, numeric MonthlyCharges, 3-class
    Contract) and data/test.csv; requests name paths relative to it."""
    rng = np.random.default_rng(0)
    n = 120
    frame = pd.DataFrame({
        "customerID": [f"c{i}" for i in range(n)],
        "tenure": rng.integers(1, 70, n),
        "MonthlyCharges": rng.normal(60, 20, n).round(2),
        "Contract": rng.choice(["month", "year", "two-year"], n),
        "Churn": rng.choice(["Yes", "No"], n),
    })
    (tmp_path / "data").mkdir()
    frame.to_csv(tmp_path / "data" / "telco.csv", index=False)
    frame.head(30).to_csv(tmp_path / "data" / "test.csv", index=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def parse(text: str) -> Request:
    return parse_request(text, Path.cwd())


@pytest.mark.parametrize("text,target,metric,task_type,constraints", [
    ("predict churn from data/telco.csv, maximise AUC, predictions under 5 ms per row",
     "Churn", "roc_auc", None, {"max_predict_ms_per_row": 5.0}),
    ("Predict Churn in data/telco.csv and maximize ROC-AUC", "Churn", "roc_auc", None, {}),
    ("predict whether a customer churns from data/telco.csv", "Churn", None, None, {}),
    ("churn prediction for data/telco.csv, 2ms/row", "Churn", None, None,
     {"max_predict_ms_per_row": 2.0}),
    ("using data/telco.csv, the target column is MonthlyCharges; minimise RMSE",
     "MonthlyCharges", "rmse", None, {}),
    ("regress monthly charges on data/telco.csv with the lowest mean absolute error",
     "MonthlyCharges", "mae", "regression", {}),
    ("data/telco.csv: Churn is the target, F1 score", "Churn", "f1", None, {}),
    ("classify customers of data/telco.csv by `Contract`, weighted F1", "Contract",
     "f1_weighted", "classification", {}),
    ("target: tenure, data/telco.csv, r-squared", "tenure", "r2", None, {}),
    ("forecast MonthlyCharges from data/telco.csv, minimise mean squared error",
     "MonthlyCharges", "rmse", None, {}),
    ("predict churn from data/telco.csv with a model under 10 MB that trains in under 2 min",
     "Churn", None, None, {"max_model_mb": 10.0, "max_train_seconds": 120.0}),
    ("predict churn from 'data/telco.csv', accuracy, at most 300 microseconds per prediction, "
     "model smaller than 512 KB, training within 45 s",
     "Churn", "accuracy", None,
     {"max_predict_ms_per_row": 0.3, "max_model_mb": 0.5, "max_train_seconds": 45.0}),
    ("predict churn from data/telco.csv, lowest log loss", "Churn", "log_loss", None, {}),
])
def test_words_settle_the_task(here: Path, text: str, target: str, metric: str | None,
                               task_type: str | None, constraints: dict[str, float]) -> None:
    request = parse(text)
    assert request.data == (here / "data" / "telco.csv").resolve()
    assert request.target == target
    assert request.metric == metric
    assert request.task_type == task_type
    assert request.constraints == pytest.approx(constraints)
    assert request.missing() == []
    assert request.sources["target"].startswith("request")


def test_a_test_file_is_told_apart(here: Path) -> None:
    request = parse("predict churn from data/telco.csv, test on data/test.csv")
    assert request.data is not None and request.data.name == "telco.csv"
    assert request.test is not None and request.test.name == "test.csv"


@pytest.mark.parametrize("text,needles", [
    ("predict churn or tenure from data/telco.csv", ["`Churn`", "`tenure`"]),
    ("data/telco.csv: use 'Churn' and 'Contract'", ["`Churn`", "`Contract`"]),
    ("predict churn from data/telco.csv with AUC and accuracy", ["roc_auc", "accuracy"]),
    ("predict churn from data/telco.csv and data/test.csv", ["telco.csv", "test.csv"]),
    ("predict churn from data/telco.csv, classification or regression", ["both"]),
])
def test_ambiguity_lists_the_choices(here: Path, text: str, needles: list[str]) -> None:
    with pytest.raises(UserError) as err:
        parse(text)
    assert all(n in str(err.value) for n in needles), err.value


@pytest.mark.parametrize("text,needle", [
    ("predict churn from data/telco.csv, maximise RMSE", "minimise"),
    ("predict churn from data/telco.csv, minimise AUC", "maximise"),
    ("classify churn in data/telco.csv with the lowest MAE", "regression"),
    ("regress tenure on data/telco.csv, maximise accuracy", "binary or multiclass"),
    ("predict churn from data/missing.csv", "not a file"),
    ("   ", "empty"),
])
def test_contradictions_are_user_errors(here: Path, text: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        parse(text)


@pytest.mark.parametrize("text,needle", [
    ("predict churn from data/telco.csv, minimise RMSE", "rmse"),
    ("predict MonthlyCharges from data/telco.csv, maximise AUC", "regression"),
    ("predict churn from data/telco.csv as a regression", "not numeric"),
])
def test_metric_and_task_type_are_checked_against_the_data(here: Path, text: str,
                                                           needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        resolve_request(text, llm=None)


def test_f1_on_a_multiclass_target_means_weighted_f1(here: Path) -> None:
    request = resolve_request("predict Contract from data/telco.csv, maximise F1", llm=None)
    assert request.kind == "multiclass" and request.metric == "f1_weighted"
    assert "weighted" in request.sources["metric"]


def test_stated_regression_wins_over_inferred_classes(here: Path) -> None:
    frame = pd.read_csv(here / "data" / "telco.csv")
    frame["rating"] = np.arange(len(frame)) % 5 + 1  # 5 integer values: inferred as classes
    frame.to_csv(here / "data" / "rated.csv", index=False)
    assert resolve_request("predict rating from data/rated.csv", llm=None).kind == "multiclass"
    stated = resolve_request("regress rating on data/rated.csv", llm=None)
    assert stated.kind == "regression" and stated.task_type == "regression"


def test_no_llm_is_made_when_the_words_settle_it(here: Path) -> None:
    def forbidden() -> ScriptedLLM:
        raise AssertionError("an LLM was made although the request was complete")

    request = resolve_request("predict churn from data/telco.csv, maximise AUC", llm=forbidden)
    assert (request.target, request.metric, request.kind) == ("Churn", "roc_auc", "binary")


def _scripted(tmp: Path, *replies: object) -> ScriptedLLM:
    path = tmp / "llm.json"
    path.write_text(json.dumps({"request": [json.dumps(r) if isinstance(r, dict) else r
                                            for r in replies]}))
    return ScriptedLLM(path)


def test_llm_fills_the_missing_target(here: Path) -> None:
    llm = _scripted(here, "```json\n" + json.dumps(
        {"target": "Churn", "sure": True, "alternatives": []}) + "\n```")
    request = resolve_request("forecast customer attrition for data/telco.csv, maximise AUC",
                              llm=lambda: llm)
    assert request.target == "Churn" and request.sources["target"] == "LLM"
    assert request.metric == "roc_auc" and llm._used == {"request": 1}


def test_llm_prompt_asks_only_for_what_is_missing(here: Path) -> None:
    request = parse("forecast customer attrition for data/telco.csv, maximise AUC")
    assert request.missing() == ["target"]
    prompt = llm_prompt(request, ["target"], [])
    schema = prompt.json_schema
    assert schema is not None and set(schema["properties"]) == {"target", "sure", "alternatives"}
    assert schema["properties"]["target"]["enum"] == list(request.columns)
    assert "customer attrition" in prompt.messages[1]["content"]
    assert prompt.tag == "request" and prompt.temperature == 0.0


def test_llm_picks_the_data_file_then_the_target_from_the_words(here: Path) -> None:
    llm = _scripted(here, {"data": "data/telco.csv", "sure": True, "alternatives": []})
    request = resolve_request("predict churn, maximise AUC", llm=lambda: llm)
    assert request.data == (here / "data" / "telco.csv").resolve()
    assert request.target == "Churn" and request.sources["target"].startswith("request")
    assert llm._used == {"request": 1}  # the target came from the words, not a second call


@pytest.mark.parametrize("answer,needles", [
    ({"target": "Churn", "sure": False, "alternatives": ["Contract"]}, ["Churn", "Contract"]),
    ({"target": "Churn", "sure": True, "alternatives": ["tenure"]}, ["Churn", "tenure"]),
    ({"target": "revenue", "sure": True, "alternatives": []}, ["revenue"]),
    ("I think the target is Churn.", ["could not read"]),
])
def test_an_unsure_or_wrong_llm_is_an_error(here: Path, answer: object,
                                            needles: list[str]) -> None:
    llm = _scripted(here, answer)
    with pytest.raises(UserError) as err:
        resolve_request("forecast attrition for data/telco.csv", llm=lambda: llm)
    assert all(n in str(err.value) for n in needles), err.value


def test_without_an_llm_a_missing_field_is_named(here: Path) -> None:
    with pytest.raises(UserError, match="target"):
        resolve_request("forecast attrition for data/telco.csv", llm=None)


def test_llm_names_a_metric_the_words_did_not(here: Path) -> None:
    llm = _scripted(here, {"metric": "accuracy"})
    request = resolve_request("predict churn from data/telco.csv, optimise the hit rate",
                              llm=lambda: llm)
    assert request.metric == "accuracy" and request.sources["metric"] == "LLM"


def test_flags_win_over_the_words(here: Path) -> None:
    request = resolve_request("predict churn from data/telco.csv, maximise AUC", llm=None,
                              flags={"target": "Contract", "metric": "accuracy"})
    assert (request.target, request.metric) == ("Contract", "accuracy")
    assert request.sources["target"] == "flag"


def test_json_replies_parse_leniently() -> None:
    assert parse_json_reply('Sure!\n{"target": "a\tb"}') == {"target": "a\tb"}
    with pytest.raises(ValueError):
        parse_json_reply("no json here")


def test_the_spec_shows_where_each_field_came_from(here: Path) -> None:
    request = resolve_request("predict churn from data/telco.csv, under 5 ms per row", llm=None)
    shown = request.describe()
    assert "target: Churn" in shown and "request: 'churn'" in shown
    assert "task type: binary" in shown and "inferred" in shown
    assert "max_predict_ms_per_row: 5" in shown
    values = request.config_values()
    assert values["max_predict_ms_per_row"] == 5.0 and values["description"].startswith("predict")


@pytest.mark.slow
def test_the_embedded_llm_answers_in_json_within_the_choices(here: Path) -> None:
    """The real model with its decoding constrained by the schema: a valid column, as JSON."""
    from actors.llama_backend import LlamaLLM

    request = resolve_request("forecast customer attrition for data/telco.csv, maximise AUC",
                              llm=lambda: LlamaLLM(n_ctx=2048, n_threads=1))
    assert request.target in request.columns and request.sources["target"] == "LLM"
    assert request.target == "Churn"
