"""Repeats: mean, standard deviation and a Student-t confidence interval per headline metric."""

from __future__ import annotations

import math
from collections.abc import Sequence

from quantbench.schemas.bench import Interval

# Two-sided Student-t critical values, t_{(1+c)/2, df}, for the confidence levels people use.
# (A table rather than scipy: three levels and df <= 30 cover repeats of 2..20; beyond it the
# normal quantile is within 2 %.)
_T_TABLE: dict[float, list[float]] = {
    0.90: [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782,
           1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711,
           1.708, 1.706, 1.703, 1.701, 1.699, 1.697],
    0.95: [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
           2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
           2.060, 2.056, 2.052, 2.048, 2.045, 2.042],
    0.99: [63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055,
           3.012, 2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797,
           2.787, 2.779, 2.771, 2.763, 2.756, 2.750],
}  # fmt: skip
_Z = {0.90: 1.645, 0.95: 1.960, 0.99: 2.576}


def t_critical(confidence: float, df: int) -> float:
    """The t quantile for a two-sided interval; the nearest tabulated confidence level is used."""
    level = min(_T_TABLE, key=lambda c: abs(c - confidence))
    if df < 1:
        return math.nan
    return _T_TABLE[level][df - 1] if df <= 30 else _Z[level]


def estimate(values: Sequence[float], confidence: float = 0.95) -> Interval | None:
    """Mean and interval of finite values (None where no repeat produced the metric).

    mean ± half_width is the confidence interval (the bench summary's interval schema)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return None
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return Interval(mean=mean, std=0.0, n=1, half_width=math.nan, confidence=confidence)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half_width = t_critical(confidence, n - 1) * std / math.sqrt(n)
    return Interval(mean=mean, std=std, n=n, half_width=half_width, confidence=confidence)
