"""Verification stages: implementation flags (pure), request warnings (on prepared data) and
the machine's warning of a nearly full disk."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from common.metric import METRICS
from engine import search_run
from engine.task.feasibility import request_warnings
from engine.task.prepare import TaskSpec, prepare_task
from operators.flags import (
    PERFECT_VALID,
    READS_OUTSIDE_INPUT,
    VALID_BEATS_TRAIN,
    implementation_flags,
    outside_reads,
    perfect_score,
    valid_beats_train,
)


@pytest.mark.parametrize("metric,raw,perfect", [
    ("roc_auc", 1.0, True), ("roc_auc", 0.999, False), ("accuracy", 1.0, True),
    ("f1_weighted", 0.98, False), ("rmse", 0.0, True), ("rmse", 1e-3, False),
    ("mae", 0.0, True), ("r2", 1.0, True), ("log_loss", 1e-12, True), ("log_loss", 0.01, False),
])
def test_perfect_valid_score(metric: str, raw: float, perfect: bool) -> None:
    assert perfect_score(METRICS[metric], raw) is perfect


@pytest.mark.parametrize("metric,valid,train,flag", [
    ("roc_auc", 0.95, 0.80, True),   # valid far better than in-sample: suspicious
    ("roc_auc", 0.85, 0.80, False),  # within chance
    ("roc_auc", 0.75, 1.00, False),  # overfitting is normal (a forest memorises train)
    ("rmse", 1.0, 2.0, True),        # valid error half the train error
    ("rmse", 1.9, 2.0, False),
    ("log_loss", 0.1, 0.5, True),
    ("r2", 0.9, 0.5, True),
    ("rmse", 1.0, None, False),      # no train score: nothing to compare
])
def test_valid_beats_train(metric: str, valid: float, train: float | None, flag: bool) -> None:
    assert valid_beats_train(METRICS[metric], valid, train) is flag


@pytest.mark.parametrize("code,found", [
    ('import pandas as pd\ndf = pd.read_csv("input/train.csv")\n', []),
    ('import pandas as pd\ndf = pd.read_csv("./input/train.csv")\n', []),
    ('open("submission/valid.csv", "w").write("x")\n', []),
    ('open("/etc/passwd").read()\n', ["/etc/passwd"]),
    ('open("/tmp/out.txt", "w")\n', []),  # a write, not a read
    ('import os\nos.walk("..")\n', [".."]),
    ('import os\nos.listdir()\n', []),  # the workdir itself
    ('import os\nfor r, d, f in os.walk("/"):\n    pass\n', ["/"]),
    ('import pandas as pd\npd.read_csv("train.csv")\n', ["train.csv"]),
    ('import pandas as pd\nPATH = "../task/valid_labels.csv"\npd.read_csv(PATH)\n',
     ["../task/valid_labels.csv"]),
    ('import os, pandas as pd\npd.read_csv(os.path.join("..", "task", "x.csv"))\n',
     ["../task/x.csv"]),
    ('from pathlib import Path\n(Path("/home") / "u" / "x.csv").read_text()\n', ["/home/u/x.csv"]),
    ('from pathlib import Path\nPath("/run/labels.csv").read_text()\n', ["/run/labels.csv"]),
    ('import glob\nglob.glob("input/*.csv")\n', []),
    ('import glob\nglob.glob("/data/**/*.csv")\n', ["/data/**/*.csv"]),
    ('import numpy as np\nnp.load(f"/models/w.npy")\n', ["/models/w.npy"]),
    ('import pandas as pd\ndef f(p):\n    return pd.read_csv(p)\n', []),  # computed: not judged
    ('x = = 1\n', []),  # does not parse
])
def test_outside_reads(code: str, found: list[str]) -> None:
    assert outside_reads(code) == found


def test_flags_in_fixed_order() -> None:
    code = 'import pandas as pd\npd.read_csv("/data/extra.csv")\n'
    flags = implementation_flags(METRICS["roc_auc"], code, 1.0, 0.8)
    assert flags == [PERFECT_VALID, VALID_BEATS_TRAIN, READS_OUTSIDE_INPUT]
    assert implementation_flags(METRICS["roc_auc"], "print(1)\n", 0.8, 0.9) == []


def _prepare(tmp_path: Path, frame: pd.DataFrame, target: str):  # type: ignore[no-untyped-def]
    frame.to_csv(tmp_path / "d.csv", index=False)
    return prepare_task(TaskSpec(tmp_path / "d.csv", target))


def test_request_warnings_name_leaks_rare_classes_and_small_splits(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 100
    label = rng.choice(["a", "b"], n).astype(object)
    label[0] = "lonely"
    frame = pd.DataFrame({"x": rng.normal(size=n), "copy": np.where(label == "a", 1, 0),
                          "label": label})
    frame.loc[label == "lonely", "copy"] = 2
    frame["same_levels"] = rng.permutation(frame["copy"].to_numpy())  # as many levels, no copy
    warnings = request_warnings(_prepare(tmp_path, frame, "label"))
    text = "\n".join(warnings)
    assert "'lonely'" in text and "single row" in text
    assert "`copy`" in text and "leakage" in text and "same_levels" not in text
    assert "valid split has 20 rows" in text


def test_regression_target_copy_is_a_rescaled_column(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    y = rng.normal(size=300)
    frame = pd.DataFrame({"id": np.arange(300), "x": rng.normal(size=300), "cents": y * 100,
                          "y": y})
    warnings = request_warnings(_prepare(tmp_path, frame, "y"))
    assert len(warnings) == 1 and "`cents`" in warnings[0] and "`id`" not in warnings[0]


def test_a_column_empty_in_every_row_is_warned_of(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(size=300)
    frame = pd.DataFrame({"a": a, "blank": np.nan, "some": np.where(a > 1, 1.0, np.nan),
                          "y": np.where(a > 0, "p", "n")})
    warnings = request_warnings(_prepare(tmp_path, frame, "y"))
    assert len(warnings) == 1 and "`blank`" in warnings[0] and "empty" in warnings[0]
    assert "`some`" not in warnings[0]


def test_a_clean_task_has_no_warnings(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    a = rng.normal(size=400)
    frame = pd.DataFrame({"a": a, "b": rng.normal(size=400), "y": np.where(a > 0, "p", "n")})
    assert request_warnings(_prepare(tmp_path, frame, "y")) == []


def test_a_nearly_full_disk_is_warned_of_once(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """Ray refuses new objects on a disk 95 % full, and the candidates it refuses are lost:
    a start says so before it begins, once per disk, for a run directory not yet made."""
    free = {"value": 5 * 2**30}
    monkeypatch.setattr(search_run.shutil, "disk_usage",
                        lambda path: SimpleNamespace(total=100 * 2**30, free=free["value"]))
    run_dir, temp = tmp_path / "runs" / "new", tmp_path
    [line] = search_run.disk_warnings([run_dir, temp])
    assert line == (f"the disk of {tmp_path} is 95% full (5.0 GiB free): Ray refuses new "
                    "objects at 95 % and the candidates it refuses are lost; free some space "
                    "first")
    free["value"] = 11 * 2**30
    assert search_run.disk_warnings([run_dir, temp]) == []
