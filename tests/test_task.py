"""Task preparation: type inference, splits, bad inputs, persistence, description and preview."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import train_test_split

import engine.task.checks as task_checks
import engine.task.prepare as prepare_module
import engine.task.text as text_module
from common.errors import StoreError, UserError
from common.metric import label_str, label_strs, positive_label
from engine.task.prepare import (
    PreparedTask,
    TaskSpec,
    load_task,
    prepare_task,
    save_task,
    sorted_labels,
)

DATASETS = Path("/work/shared/datasets")


def _frame(n: int = 200, seed: int = 0, target: np.ndarray | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "x1": rng.normal(size=n),
            "x2": rng.integers(0, 100, size=n),
            "colour": rng.choice(["red", "green", "blue"], size=n),
        }
    )
    if target is not None:
        frame["y"] = target
    return frame


def _write(tmp_path: Path, frame: pd.DataFrame, name: str = "data.csv") -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def _prepare(tmp_path: Path, frame: pd.DataFrame, seed: int = 0, **spec: object) -> PreparedTask:
    return prepare_task(TaskSpec(data=_write(tmp_path, frame), target="y", **spec), seed=seed)  # type: ignore[arg-type]


# --- type inference ---------------------------------------------------------------------------


def _binary_strings(n: int) -> np.ndarray:
    return np.where(np.arange(n) % 3 == 0, "yes", "no")


@pytest.mark.parametrize(
    ("make_target", "task_type", "labels", "metric"),
    [
        (_binary_strings, "binary", ("no", "yes"), "f1"),
        (lambda n: np.arange(n) % 2, "binary", ("0", "1"), "f1"),
        (lambda n: 3 + np.arange(n) % 7, "multiclass", tuple(str(i) for i in range(3, 10)),
         "f1_weighted"),
        (lambda n: np.linspace(0.0, 50.0, n) ** 1.5, "regression", (), "rmse"),
        (lambda n: np.where(np.arange(n) % 2 == 0, True, False), "binary", ("False", "True"),
         "f1"),
        (lambda n: np.array(["a", "b", "c", "d"])[np.arange(n) % 4], "multiclass",
         ("a", "b", "c", "d"), "f1_weighted"),
    ],
    ids=["binary-strings", "binary-ints", "multiclass-ints-3..9", "regression-floats",
         "binary-bools", "multiclass-strings"],
)
def test_task_type_inference(
    tmp_path: Path,
    make_target: Callable[[int], np.ndarray],
    task_type: str,
    labels: tuple[str, ...],
    metric: str,
) -> None:
    task = _prepare(tmp_path, _frame(400, target=make_target(400)))
    assert task.task_type == task_type
    assert task.labels == labels
    assert task.metric.name == metric


def test_integer_target_with_many_values_is_regression(tmp_path: Path) -> None:
    # 30 distinct integers: an amount, not 30 classes.
    task = _prepare(tmp_path, _frame(400, target=np.arange(400) % 30))
    assert task.task_type == "regression"


def test_integer_target_with_few_rows_per_value_is_regression(tmp_path: Path) -> None:
    # 10 values over 100 rows is 10% distinct: too sparse to be classes.
    task = _prepare(tmp_path, _frame(100, target=np.arange(100) % 10))
    assert task.task_type == "regression"


def test_class_column_with_missing_values_keeps_integer_labels(tmp_path: Path) -> None:
    target = (np.arange(300) % 2).astype(float)
    target[::50] = np.nan
    task = _prepare(tmp_path, _frame(300, target=target))
    assert task.task_type == "binary"
    assert task.labels == ("0", "1")
    assert len(task.train) + len(task.valid_y) + len(task.test_y) == 294
    # Written back as the integers the file had, not 0.0 / 1.0.
    assert set(task.split_files["train.csv"].decode().splitlines()[1].split(",")[-1]) <= {"0", "1"}
    assert "6 rows without a value of `y` were dropped" in task.description


def test_label_helpers() -> None:
    assert label_str(1.0) == "1"
    assert label_str(np.int64(3)) == "3"
    assert label_str(True) == "True"
    assert label_str("a") == "a"
    for values in ([3, 1, 3], np.array([1.0, 2.5, np.nan, 1.0]), np.array([True, False]),
                   np.array([1, 0], dtype=np.int8), pd.Series(["b", "a", "b"], dtype="string"),
                   np.array([True, 1, 1.0, "x"], dtype=object), []):
        assert list(label_strs(values)) == [label_str(v) for v in values]  # one by one's
    text = np.array(["b", "a", "7"], dtype=object)  # all text: its own labels, in a copy
    assert list(label_strs(text)) == ["b", "a", "7"] and label_strs(text) is not text
    assert sorted_labels(["10", "9", "2"]) == ("2", "9", "10")
    assert sorted_labels(["b", "a"]) == ("a", "b")
    assert positive_label(("0", "1")) == "1"
    assert positive_label(("-1", "1")) == "1"
    assert positive_label(("no", "yes")) == "yes"
    assert positive_label(("Yes", "maybe")) == "Yes"  # named positive wins over sort order
    assert positive_label(("bad", "good")) == "good"


# --- metric choice ----------------------------------------------------------------------------


def test_metric_may_be_named(tmp_path: Path) -> None:
    task = _prepare(tmp_path, _frame(200, target=_binary_strings(200)), metric="roc_auc")
    assert task.metric.name == "roc_auc"
    assert "proba_yes" in task.description
    alias = _prepare(tmp_path, _frame(200, target=_binary_strings(200)), metric="AUC")
    assert alias.metric.name == "roc_auc"


# --- splits -----------------------------------------------------------------------------------


def test_split_sizes_are_60_20_20(tmp_path: Path) -> None:
    task = _prepare(tmp_path, _frame(1000, target=np.linspace(0, 1, 1000)))
    assert (len(task.train), len(task.valid_X), len(task.test_X)) == (600, 200, 200)
    assert len(task.valid_y) == 200 and len(task.test_y) == 200


def test_split_is_stratified(tmp_path: Path) -> None:
    # 10% minority class: every split keeps the 10%, which a random split would miss by chance.
    target = np.where(np.arange(1000) % 10 == 0, "rare", "common")
    task = _prepare(tmp_path, _frame(1000, target=target))
    for labels in (task.train["y"], task.valid_y, task.test_y):
        share = float((labels == "rare").mean())
        assert share == pytest.approx(0.10, abs=0.005)


def test_split_by_class_codes_is_sklearns_split_by_label_text() -> None:
    # The strata are integer codes in the labels' text order, so the rows each split gets are
    # the ones sklearn picks from the texts: "10" sorts before "9", "b" appears first.
    rng = np.random.default_rng(3)
    target = pd.Series(rng.choice([9, 10, 2, 31], size=2000, p=[0.5, 0.3, 0.15, 0.05]))
    words = pd.Series(rng.choice(["b", "a", "C"], size=2000))
    for labels in (target, words):
        idx = np.arange(len(labels))
        texts = label_strs(labels)
        for share, seed in ((0.2, 0), (0.25, 7)):
            ours = prepare_module._split(idx, prepare_module._strata(labels, "multiclass"),
                                         share, seed)
            theirs = train_test_split(idx, test_size=share, random_state=seed, stratify=texts)
            for got, want in zip(ours, theirs, strict=True):
                np.testing.assert_array_equal(got, want)


def test_rare_class_falls_back_to_unstratified_split(tmp_path: Path) -> None:
    target = np.where(np.arange(300) % 2 == 0, "a", "b").astype(object)
    target[7] = "lonely"  # one member: stratification is impossible
    task = _prepare(tmp_path, _frame(300, target=target))
    assert task.labels == ("a", "b", "lonely")
    assert len(task.train) + len(task.valid_X) + len(task.test_X) == 300


def test_same_seed_same_hash_other_seed_other_hash(tmp_path: Path) -> None:
    frame = _frame(300, target=_binary_strings(300))
    first = _prepare(tmp_path, frame, seed=1)
    again = _prepare(tmp_path, frame, seed=1)
    other = _prepare(tmp_path, frame, seed=2)
    assert first.data_hash == again.data_hash
    assert first.inputs() == again.inputs()
    assert first.data_hash != other.data_hash


def test_splits_partition_the_rows(tmp_path: Path) -> None:
    frame = _frame(300, target=np.linspace(0, 1, 300))
    frame["row_id"] = np.arange(300)
    task = _prepare(tmp_path, frame)
    ids = [*task.train["row_id"], *task.valid_X["row_id"], *task.test_X["row_id"]]
    assert sorted(ids) == list(range(300))
    # valid_y is aligned with valid_X: y == row_id / 299 by construction.
    np.testing.assert_allclose(task.valid_y.to_numpy(), task.valid_X["row_id"] / 299)


def test_given_test_file_is_the_test_split(tmp_path: Path) -> None:
    data = _frame(400, seed=0, target=_binary_strings(400))
    test = _frame(50, seed=1, target=_binary_strings(50))
    test_path = _write(tmp_path, test, "test.csv")
    task = _prepare(tmp_path, data, test=test_path)
    assert len(task.test_X) == 50
    pd.testing.assert_frame_equal(task.test_X, test.drop(columns=["y"]), check_dtype=False)
    assert list(task.test_y) == list(test["y"])
    assert (len(task.train), len(task.valid_X)) == (300, 100)


def test_given_test_file_may_order_columns_differently(tmp_path: Path) -> None:
    data = _frame(200, target=_binary_strings(200))
    test = _frame(30, seed=1, target=_binary_strings(30))[["y", "colour", "x2", "x1"]]
    task = _prepare(tmp_path, data, test=_write(tmp_path, test, "test.csv"))
    assert list(task.test_X.columns) == ["x1", "x2", "colour"]


# --- bad inputs -------------------------------------------------------------------------------


def _bad_input(tmp_path: Path, case: str) -> tuple[TaskSpec, str]:
    """A spec that must be refused, and a fragment its message must contain."""
    good = _frame(100, target=_binary_strings(100))
    path = tmp_path / "data.csv"
    if case == "missing-file":
        return TaskSpec(tmp_path / "nope.csv", "y"), "does not exist"
    if case == "directory":
        return TaskSpec(tmp_path, "y"), "is a directory"
    if case == "empty-file":
        path.write_bytes(b"")
        return TaskSpec(path, "y"), "is empty"
    if case == "header-only":
        path.write_text("x1,x2,y\n")
        return TaskSpec(path, "y"), "no data rows"
    if case == "not-utf8":
        path.write_bytes("name,y\ncaf\xe9,1\nthé,0\n".encode("latin-1"))
        return TaskSpec(path, "y"), "re-save it as a UTF-8 CSV"
    if case == "duplicate-columns":
        path.write_text("a,b,a,y\n" + "1,2,3,0\n" * 20 + "1,2,3,1\n" * 20)
        return TaskSpec(path, "y"), "duplicate column names: 'a'"
    if case == "target-missing":
        good.rename(columns={"y": "Price"}).to_csv(path, index=False)
        return TaskSpec(path, "price"), "did you mean `Price`"
    if case == "target-all-missing":
        good.assign(y=np.nan).to_csv(path, index=False)
        return TaskSpec(path, "y"), "empty in every row"
    if case == "one-class":
        good.assign(y="same").to_csv(path, index=False)
        return TaskSpec(path, "y"), "one value ('same') in every row"
    if case == "too-many-classes":
        pd.DataFrame({"x": range(500), "y": [f"id-{i}" for i in range(500)]}).to_csv(
            path, index=False
        )
        return TaskSpec(path, "y"), "500 distinct non-numeric values"
    if case == "unknown-metric":
        good.to_csv(path, index=False)
        return TaskSpec(path, "y", metric="precision"), "known metrics: f1,"
    if case == "metric-for-other-type":
        good.to_csv(path, index=False)
        return TaskSpec(path, "y", metric="rmse"), "'rmse' is for regression"
    if case == "too-few-rows":
        good.head(6).to_csv(path, index=False)
        return TaskSpec(path, "y"), "at least 10"
    if case == "no-features":
        good[["y"]].to_csv(path, index=False)
        return TaskSpec(path, "y"), "only the target column"
    if case == "semicolons":
        good.to_csv(path, index=False, sep=";")
        return TaskSpec(path, "y"), "separated by ';'"
    if case == "ragged-rows":
        path.write_text("a,b,y\n" + "1,2,0\n" * 10 + "1,2,3,4,5\n" + "1,2,1\n" * 10)
        return TaskSpec(path, "y"), "not a readable CSV"
    if case == "test-lacks-target":
        good.to_csv(path, index=False)
        test = _write(tmp_path, good.drop(columns=["y"]), "test.csv")
        return TaskSpec(path, "y", test=test), "has no target column `y`"
    if case == "test-other-columns":
        good.to_csv(path, index=False)
        test = _write(tmp_path, good.rename(columns={"x1": "z"}), "test.csv")
        return TaskSpec(path, "y", test=test), "lacks x1 and has extra z"
    if case == "test-unknown-label":
        good.to_csv(path, index=False)
        test = _write(tmp_path, good.assign(y="maybe"), "test.csv")
        return TaskSpec(path, "y", test=test), "'maybe'"
    raise AssertionError(case)


BAD_INPUTS = [
    "missing-file", "directory", "empty-file", "header-only", "not-utf8", "duplicate-columns",
    "target-missing", "target-all-missing", "one-class", "too-many-classes", "unknown-metric",
    "metric-for-other-type", "too-few-rows", "no-features", "semicolons", "ragged-rows",
    "test-lacks-target", "test-other-columns", "test-unknown-label",
]


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_a_one_line_user_error(tmp_path: Path, case: str) -> None:
    spec, fragment = _bad_input(tmp_path, case)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(UserError) as caught:
        prepare_task(spec)
    message = str(caught.value)
    assert fragment in message
    assert "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_file_over_the_size_guard_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, _frame(100, target=_binary_strings(100)))
    monkeypatch.setattr(task_checks, "MAX_DATA_BYTES", 100)
    with pytest.raises(UserError, match=r"over the 100 B this machine.s memory can search"):
        prepare_task(TaskSpec(path, "y"))


def test_a_bad_byte_deep_in_the_file_is_named_at_its_offset(tmp_path: Path) -> None:
    # The file is parsed from disk and scanned a MiB at a time only once it fails: an "é" (two
    # bytes) straddles the first MiB's end, and a Latin-1 byte comes after it.
    path = tmp_path / "data.csv"
    head = b"name,y\n"
    line = b"ab,1\n"
    lines = ((1 << 20) - len(head)) // len(line)
    filler = head + line * lines
    pad = (1 << 20) - 2 - len(filler)  # then "x", then the "é" from the MiB's last byte on
    body = filler + b"c" * pad + b"x\xc3\xa9,0\n" + line * 10
    bad_at = len(body) + 3
    path.write_bytes(body + b"caf\xe9,1\n" + line * 10)
    assert body.index(b"\xc3\xa9") == (1 << 20) - 1
    with pytest.raises(UserError) as caught:
        prepare_task(TaskSpec(path, "y"))
    assert f"byte 0xe9 at offset {bad_at})" in str(caught.value)


def test_utf8_with_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    text = _frame(100, target=_binary_strings(100)).to_csv(index=False)
    path.write_bytes(text.encode("utf-8-sig"))
    task = prepare_task(TaskSpec(path, "y"))
    assert list(task.train.columns) == ["x1", "x2", "colour", "y"]


def test_metric_listing_names_fitting_metrics(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"use one of f1, f1_weighted, accuracy, roc_auc, log_loss"):
        _prepare(tmp_path, _frame(100, target=_binary_strings(100)), metric="r2")


# --- persistence ------------------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    task = _prepare(tmp_path, _frame(300, target=3 + np.arange(300) % 7))
    save_task(task, tmp_path / "run" / "task")
    names = {p.name for p in (tmp_path / "run" / "task").iterdir()}
    assert names == {
        "train.csv", "valid.csv", "test.csv", "valid_labels.csv", "test_labels.csv",
        "description.md", "task.json",
    }
    meta = json.loads((tmp_path / "run" / "task" / "task.json").read_text())
    assert meta["data_hash"] == task.data_hash and meta["metric"] == "f1_weighted"
    loaded = load_task(tmp_path / "run" / "task")
    assert loaded.data_hash == task.data_hash
    assert (loaded.target, loaded.task_type, loaded.labels, loaded.seed) == (
        task.target, task.task_type, task.labels, task.seed,
    )
    assert loaded.metric == task.metric
    assert loaded.inputs() == task.inputs()
    assert loaded.preview() == task.preview()
    pd.testing.assert_frame_equal(loaded.train, task.train)
    pd.testing.assert_series_equal(loaded.test_y, task.test_y)


def test_load_refuses_tampered_labels(tmp_path: Path) -> None:
    task = _prepare(tmp_path, _frame(300, target=_binary_strings(300)))
    folder = tmp_path / "task"
    save_task(task, folder)
    labels = folder / "valid_labels.csv"
    labels.write_text(labels.read_text().replace("yes", "no", 1))
    with pytest.raises(StoreError, match=r"does not match its task\.json"):
        load_task(folder)


def test_load_refuses_incomplete_folder(tmp_path: Path) -> None:
    task = _prepare(tmp_path, _frame(300, target=_binary_strings(300)))
    save_task(task, tmp_path / "task")
    (tmp_path / "task" / "test_labels.csv").unlink()
    with pytest.raises(StoreError, match="unreadable"):
        load_task(tmp_path / "task")


# --- what the candidate sees ------------------------------------------------------------------


def test_inputs_hide_the_labels(tmp_path: Path) -> None:
    frame = _frame(300, target=_binary_strings(300))
    task = _prepare(tmp_path, frame)
    inputs = task.inputs()
    assert set(inputs) == {"train.csv", "valid.csv", "test.csv", "description.md"}
    assert inputs["train.csv"].decode().splitlines()[0] == "x1,x2,colour,y"
    for name in ("valid.csv", "test.csv"):
        header = inputs[name].decode().splitlines()[0]
        assert header == "x1,x2,colour"
        assert len(inputs[name].decode().splitlines()) == 61
    assert "y" not in task.valid_X.columns and "y" not in task.test_X.columns


def test_description_states_the_contract(tmp_path: Path) -> None:
    frame = _frame(300, target=np.linspace(0, 9, 300))
    task = _prepare(tmp_path, frame, text="Predict y for the cement plant.")
    text = task.description
    assert "Predict y for the cement plant." in text
    for column in ("x1", "x2", "colour"):
        assert f"| {column} |" in text
    for library in ("pandas", "scikit-learn", "lightgbm", "optuna", "numpy"):
        assert f"- {library} " in text
    from importlib.metadata import version

    assert f"pandas {version('pandas')}" in text
    assert "rmse" in text and "lower is better" in text
    assert "submission/valid.csv" in text and "`prediction`" in text
    assert "train 180, valid 60, test 60" in text
    assert "'blue'" in text or "'red'" in text  # top values of a categorical column


def test_description_names_the_proba_columns(tmp_path: Path) -> None:
    target = np.array(["a", "b", "c"])[np.arange(300) % 3]
    task = _prepare(tmp_path, _frame(300, target=target), metric="log_loss")
    assert "proba_a, proba_b, proba_c" in task.description
    assert "lower is better" in task.description


def test_preview_is_short_and_stable(tmp_path: Path) -> None:
    task = _prepare(tmp_path, _frame(300, target=_binary_strings(300)))
    preview = task.preview()
    assert preview == task.preview()
    assert len(preview.splitlines()) <= 40
    assert "`y`" in preview and "f1" in preview and "colour" in preview
    assert len(preview) < len(task.description)


def test_preview_of_a_wide_table_stays_short(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(200, 120)), columns=[f"f{i}" for i in range(120)])
    frame["y"] = _binary_strings(200)
    task = _prepare(tmp_path, frame)
    lines = task.preview().splitlines()
    assert len(lines) <= 40
    assert max(len(line) for line in lines) <= 500
    assert any("more columns" in line for line in lines)


def test_preview_is_identical_across_prepare_calls(tmp_path: Path) -> None:
    frame = _frame(300, target=_binary_strings(300))
    assert _prepare(tmp_path, frame).preview() == _prepare(tmp_path, frame).preview()


def test_the_feature_preview_relates_columns_on_a_seeded_sample_of_a_large_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = _frame(400)
    frame["y"] = frame["x1"] * 3 + np.random.default_rng(1).normal(size=400) * 4
    task = _prepare(tmp_path, frame)
    whole = task.feature_preview()
    monkeypatch.setattr(text_module, "_RELATED_ROWS", 60)
    sampled = _prepare(tmp_path, frame).feature_preview()
    rows = task.train.sample(n=60, random_state=task.seed)
    expected = {name: abs(rows[name].corr(rows["y"], method="spearman")) for name in ("x1", "x2")}
    line = sampled.splitlines()[-1]
    assert line.startswith("Most related to the target")
    assert all(f"{name} {value:.2f}" in line for name, value in expected.items()), line
    assert line != whole.splitlines()[-1]  # 60 of 240 train rows tell another story
    monkeypatch.setattr(text_module, "_RELATED_ROWS", len(task.train))
    assert _prepare(tmp_path, frame).feature_preview() == whole  # not over: every row


def test_preparing_a_task_computes_its_column_facts_once(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    counted = prepare_module.column_facts

    def counting(*args: object) -> object:
        calls.append(1)
        return counted(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(prepare_module, "column_facts", counting)
    task = _prepare(tmp_path, _frame(100, target=_binary_strings(100)))
    preview, features = task.preview(), task.feature_preview()
    assert len(calls) == 1
    save_task(task, tmp_path / "task")
    loaded = load_task(tmp_path / "task")  # a stored task computes them when asked
    assert (loaded.preview(), loaded.feature_preview()) == (preview, features)
    assert len(calls) == 2


# --- real data sets, when the shared copies are present ---------------------------------------


@pytest.mark.parametrize(
    ("relative", "target", "task_type"),
    [
        ("penguins/penguins.csv", "species", "multiclass"),
        ("credit-g/credit_german.csv", "class", "binary"),
        ("kc1/kc1.csv", "Class", "binary"),
        ("wine-quality-white/winequality-white.csv", "quality", "multiclass"),
        ("concrete-strength/concrete.csv", "strength", "regression"),
    ],
)
def test_shared_datasets(relative: str, target: str, task_type: str) -> None:
    path = DATASETS / relative
    if not path.exists():
        pytest.skip(f"{path} not present")
    task = prepare_task(TaskSpec(path, target))
    assert task.task_type == task_type
    if task_type != "regression":
        train_share = Counter(label_str(v) for v in task.train[target])
        valid_share = Counter(label_str(v) for v in task.valid_y)
        for label in task.labels:
            if train_share[label] >= 20:
                assert valid_share[label] / len(task.valid_y) == pytest.approx(
                    train_share[label] / len(task.train), abs=0.02
                )
