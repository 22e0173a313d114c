"""The benchmark dataset registry: every shipped file loads, its target and task type hold, and
suites name only registered sets."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.datasets import AMLB_METRIC, REGISTRY, SELA_METRIC, SUITES, Dataset, suite
from common.errors import UserError
from common.metric import METRICS
from engine.task.checks import infer_task_type


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_entry_loads_with_its_target_and_task_type(name: str) -> None:
    dataset = REGISTRY[name]
    assert dataset.name == name and dataset.path.is_file()
    assert (dataset.path.parent / "SOURCE.txt").is_file()
    frame = pd.read_csv(dataset.path, low_memory=False)
    assert dataset.target in frame.columns and len(frame.columns) >= 2
    assert infer_task_type(frame[dataset.target].dropna(), dataset.target) == dataset.task_type
    for metric in (dataset.sela_metric, dataset.amlb_metric):
        assert dataset.task_type in METRICS[metric].task_types


def test_metrics_follow_sela_and_amlb() -> None:
    binary = Dataset("b", "b.csv", "y", "binary", None)
    assert (binary.sela_metric, binary.amlb_metric) == ("f1", "roc_auc")
    assert SELA_METRIC["multiclass"] == "f1_weighted" and AMLB_METRIC["multiclass"] == "log_loss"
    assert SELA_METRIC["regression"] == AMLB_METRIC["regression"] == "rmse"


def test_suites() -> None:
    assert all(n in REGISTRY for names in SUITES.values() for n in names)
    assert set(SUITES["full"]) == set(REGISTRY)
    smoke = suite("smoke")
    assert len(smoke) == 2 and {d.task_type for d in smoke} >= {"regression"}
    assert {d.task_type for d in suite("lite")} == {"binary", "multiclass", "regression"}
    assert [d.name for d in suite("kc1, penguins")] == ["kc1", "penguins"]


@pytest.mark.parametrize("bad", ["nope", "penguins,nope", "", " , "])
def test_unknown_suite_or_dataset_is_a_user_error(bad: str) -> None:
    with pytest.raises(UserError, match="unknown suite or dataset"):
        suite(bad)
