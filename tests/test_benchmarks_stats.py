"""benchmarks/stats.py: the exact sign test, Wilson intervals, the share a report prints, and
the paired bootstrap interval that benchmarks.memory and benchmarks.gain read a difference by."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.stats import paired_interval, share, sign_test, wilson
from engine.evaluation.select import resample_counts


def test_statistics() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 0) == pytest.approx(2 / 32)
    assert sign_test(3, 3) == 1.0
    low, high = wilson(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-3) and high == pytest.approx(0.7634, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)
    assert share(5, 10) == "5/10 (50%; 24%–76%)" and share(0, 0) == "0/0"
    # Paired rows whose gain is 0.1 plus noise, scored as mean gains on the same bootstrap
    # resamples: the interval holds 0.1 and not 0; with noise ten times wider it spans 0.
    rng = np.random.default_rng(1)
    counts = resample_counts(400, 2000)
    for noise, spans_zero in ((0.2, False), (2.0, True)):
        off = rng.normal(size=400)
        on = off + 0.1 + noise * rng.normal(size=400)
        low, high = paired_interval(counts @ off / 400, counts @ on / 400, maximize=True)
        assert low < 0.1 < high and (low < 0 < high) == spans_zero
        # lower is better: the same scores read the other way round
        assert paired_interval(counts @ on / 400, counts @ off / 400,
                               maximize=False) == (low, high)
