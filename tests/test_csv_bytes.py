"""The CSV bytes every input file is written as (engine/task/prepare.py `csv_bytes`): a large
frame goes through Arrow's writer, a small one or one Arrow would write otherwise through
pandas', and either reads back as the frame pandas' own bytes read back as."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from engine.task.prepare import ARROW_CSV_ROWS, csv_bytes


def _pandas_bytes(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False, lineterminator="\n").encode("utf-8")


def _read(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), low_memory=False)


def _edge_frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "x": rng.normal(size=rows) * 10.0 ** rng.integers(-8, 20, size=rows),
        "whole floats": rng.integers(0, 9, size=rows).astype(float),  # pandas writes 3.0
        "with inf": np.resize([np.inf, -0.0, 2.0, np.nan], rows),
        "count": rng.integers(-5, 500, size=rows),
        "flag": np.resize([True, False], rows),
        "flag or missing": pd.Series(np.resize([True, None, False], rows), dtype=object),
        "text": np.resize(["a,b", 'say "hi"', "line\nbreak", "", None, "007", "é"], rows),
        "level": pd.Categorical(np.resize(["low", "high"], rows)),
        7: np.resize([1.5, 2.5], rows),  # a name that is not text
    })


def test_a_large_frame_reads_back_as_pandas_own_bytes_do() -> None:
    frame = _edge_frame(ARROW_CSV_ROWS + 3)
    written = csv_bytes(frame)
    assert written != _pandas_bytes(frame)  # Arrow's: its text is quoted
    assert written.split(b"\n", 1)[0] == _pandas_bytes(frame.head(0)).rstrip(b"\n")
    pd.testing.assert_frame_equal(_read(written), _read(_pandas_bytes(frame)))
    assert _read(written)["whole floats"].dtype.kind == "f"


def test_a_small_frame_is_written_by_pandas() -> None:
    frame = _edge_frame(ARROW_CSV_ROWS - 1)
    assert csv_bytes(frame) == _pandas_bytes(frame)


@pytest.mark.parametrize("column", [
    pd.Series(pd.date_range("2020-01-01", periods=ARROW_CSV_ROWS, freq="h")),  # a date
    pd.Series([("a", 1, 2.5)[i % 3] for i in range(ARROW_CSV_ROWS)], dtype=object),  # mixed
])
def test_a_column_arrow_writes_otherwise_leaves_the_frame_to_pandas(column: pd.Series) -> None:
    frame = pd.DataFrame({"x": np.arange(ARROW_CSV_ROWS), "odd": column})
    assert csv_bytes(frame) == _pandas_bytes(frame)


def test_repeated_column_names_leave_the_frame_to_pandas() -> None:
    frame = pd.DataFrame(np.ones((ARROW_CSV_ROWS, 2)), columns=["a", "a"])
    assert csv_bytes(frame) == _pandas_bytes(frame)
