"""Small statistics for benchmark tables: means and spreads, ties up to float noise, shares with
intervals, paired sign tests, a paired bootstrap interval."""

from __future__ import annotations

import math

import numpy as np

TIE_DIGITS = 9  # scores equal to this many significant digits are a tie


def rounded(value: float) -> float:
    """The value to TIE_DIGITS significant digits: what ties compare."""
    return float(f"{value:.{TIE_DIGITS}g}")


def same(a: float, b: float) -> bool:
    """Equal up to float noise: a tie."""
    return rounded(a) == rounded(b)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def sd(values: list[float]) -> float:
    """Sample standard deviation; 0 for a single value."""
    if len(values) < 2:
        return 0.0
    centre = mean(values)
    return math.sqrt(sum((v - centre) ** 2 for v in values) / (len(values) - 1))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a share k/n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def share(k: int, n: int) -> str:
    """`k/n (p%; low–high)` with the 95% Wilson interval; "0/0" when there is nothing."""
    if not n:
        return "0/0"
    low, high = wilson(k, n)
    return f"{k}/{n} ({k / n:.0%}; {low:.0%}–{high:.0%})"


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test (McNemar's exact test for paired 0/1 outcomes)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_interval(off: np.ndarray, on: np.ndarray, maximize: bool) -> tuple[float, float]:
    """95% percentile interval of the gain of `on` over `off` (positive is better), from their
    raw scores on the same bootstrap resamples (engine.evaluation.select.resampled_scores)."""
    gains = (on - off) if maximize else (off - on)
    low, high = np.quantile(gains, [0.025, 0.975])
    return float(low), float(high)
