"""How precise a figure is: confidence intervals, the sample a figure needs, and verdicts that
say "undecided" when the interval straddles a limit.

Which interval for which figure, and why:

* **a percentile of one run** (TTFT p50, TPOT p95, ...): the distribution-free interval from order
  statistics. The number of samples below the true q-quantile is Binomial(n, q), so the
  interval between two order statistics covers it with a probability computed exactly from the
  binomial distribution: no assumption about the latency distribution, which is skewed and often
  bimodal (prefill-bound and decode-bound requests). The bootstrap percentile interval is the
  common alternative, but for tail quantiles of small samples it is known to under-cover: it
  cannot put an end beyond the largest observed value. The exact interval also says when a
  percentile means nothing: with fewer than :func:`min_samples` requests no pair of order
  statistics reaches the confidence, and the figure is reported as "too few requests for p99"
  instead of a number (at 95 %: p50 6 requests, p90 36, p95 72, p99 368).
* **a mean of one run** (TPOT mean, ...): the bootstrap percentile interval (seeded, so a rerun
  gives the same interval).
* **a rate of one run** (output tokens/s over the window): batch means, the standard interval for
  a steady-state time series: the window is cut into equal time slices, each slice's rate is one
  sample, and a Student t interval is taken over the slices (consecutive slices of a steady
  stream are close to independent; consecutive requests are not).
* **a figure over repeats**: Student t over the repeats' values, with exact t quantiles from
  scipy (any confidence level, never rounded to a tabulated one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from quantbench.schemas.base import Strict

Verdict = Literal["pass", "fail", "undecided"]
# Time slices the window is cut into for the batch-means interval of a rate.
RATE_SLICES = 10
BOOTSTRAP_RESAMPLES = 2000


class Figure(Strict):
    """A figure with its confidence interval: [low, high] holds the true value with probability
    ``confidence``, from a sample of ``n`` by ``method``. The one form every interval takes, in
    memory and in the stage outputs (``schemas.session`` and ``schemas.bench`` store it)."""

    value: float
    low: float
    high: float
    confidence: float
    n: int
    method: str

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def relative_half_width(self) -> float:
        """Half the interval's width over the value (inf for a value of 0)."""
        return self.half_width / abs(self.value) if self.value else math.inf

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


Interval = Figure


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t critical value for ``confidence`` with ``df`` degrees of freedom."""
    from scipy.stats import t

    if df < 1:
        return math.nan
    return float(t.ppf((1 + confidence) / 2, df))


def t_interval(values: Sequence[float], confidence: float, method: str = "t") -> Interval | None:
    """Mean and Student t interval of finite values; None without at least two of them."""
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if xs.size < 2:
        return None
    mean = float(xs.mean())
    half = t_quantile(confidence, xs.size - 1) * float(xs.std(ddof=1)) / math.sqrt(xs.size)
    return Interval(
        value=mean, low=mean - half, high=mean + half, confidence=confidence, n=int(xs.size),
        method=method,
    )  # fmt: skip


def min_samples(q: float, confidence: float) -> int:
    """The fewest samples for which the equal-tailed order-statistic interval of the
    ``q``-quantile (0 < q < 1) exists at ``confidence``: the smallest value must lie below the
    quantile, and the largest above it, each with probability at least 1 - alpha/2, i.e.
    q^n <= alpha/2 and (1 - q)^n <= alpha/2. (p50: 6, p90: 36, p95: 72, p99: 368 at 95 %.)"""
    alpha = 1 - confidence
    worst = max(q, 1 - q)
    return max(1, math.ceil(math.log(alpha / 2) / math.log(worst) - 1e-12))


def quantile_interval(
    values: Sequence[float], percentile: float, confidence: float
) -> Interval | None:
    """The ``percentile`` (0-100) of ``values`` with its distribution-free interval; None when
    there are too few values for one at ``confidence`` (see :func:`min_samples`).

    The point value is numpy's linear-interpolation percentile (what vLLM's benchmark reports).
    The interval is equal-tailed: with B ~ Binomial(n, q) the number of values below the true
    quantile, the r-th smallest value lies above it with probability P(B <= r - 1), so the lower
    end is the largest order statistic with that probability <= alpha/2, and symmetrically for
    the upper end: coverage >= confidence, exactly, whatever the distribution.
    """
    from scipy.stats import binom

    # +inf is a value (a request never answered is infinitely late); only NaN is dropped
    xs = np.sort(np.asarray([v for v in values if v is not None and not math.isnan(v)], float))
    n = int(xs.size)
    q = percentile / 100.0
    if n == 0 or n < min_samples(q, confidence):
        return None
    alpha = 1 - confidence
    cdf = binom.cdf(np.arange(n + 1), n, q)  # cdf[k] = P(B <= k)
    below = np.nonzero(cdf <= alpha / 2)[0]  # k with P(B <= k) <= alpha/2
    above = np.nonzero(cdf >= 1 - alpha / 2)[0]  # k with P(B <= k) >= 1 - alpha/2
    if below.size == 0 or above.size == 0:
        return None
    r = int(below[-1]) + 1  # 1-based rank of the lower end
    s = int(above[0]) + 1  # 1-based rank of the upper end
    if r < 1 or s > n:
        return None
    value = percentile_of_sorted(xs, percentile)
    return Interval(
        value=value, low=float(xs[r - 1]), high=float(xs[s - 1]), confidence=confidence, n=n,
        method="order statistics",
    )  # fmt: skip


def percentile_of_sorted(xs: np.ndarray, percentile: float) -> float:
    """numpy's linear-interpolation percentile of sorted values, where +inf is a value: a
    percentile that interpolates towards an infinite value is infinite (numpy gives NaN)."""
    pos = (xs.size - 1) * percentile / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, xs.size - 1)
    frac = pos - lo
    a, b = float(xs[lo]), float(xs[hi])
    if frac == 0 or a == b:
        return a
    if math.isinf(b):
        return b
    return a + (b - a) * frac


def bootstrap_mean_interval(
    values: Sequence[float], confidence: float, seed: int = 0
) -> Interval | None:
    """Mean with a seeded bootstrap percentile interval; None without two values."""
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if xs.size < 2:
        return None
    rng = np.random.default_rng(seed)
    means = rng.choice(xs, size=(BOOTSTRAP_RESAMPLES, xs.size), replace=True).mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return Interval(
        value=float(xs.mean()), low=float(low), high=float(high), confidence=confidence,
        n=int(xs.size), method="bootstrap",
    )  # fmt: skip


def rate_interval(
    events: Sequence[tuple[float, float]],
    start: float,
    end: float,
    confidence: float,
    slices: int = RATE_SLICES,
) -> Interval | None:
    """A rate over [start, end] (``events`` are (time, amount), e.g. tokens per chunk) with its
    batch-means interval over ``slices`` equal time slices; the value is total / duration."""
    duration = end - start
    if duration <= 0:
        return None
    total = sum(a for t, a in events if start <= t <= end)
    value = total / duration
    edges = np.linspace(start, end, slices + 1)
    per_slice = np.zeros(slices)
    for t, a in events:
        if start <= t <= end:
            k = min(slices - 1, int((t - start) / duration * slices))
            per_slice[k] += a
    rates = per_slice / (duration / slices)
    t_int = t_interval(list(rates), confidence, method=f"batch means over {slices} slices")
    if t_int is None:
        return None
    del edges
    return Interval(
        value=value, low=t_int.low, high=t_int.high, confidence=confidence, n=slices,
        method=t_int.method,
    )  # fmt: skip


def judge(op: str, limit: float, interval: Interval | None, value: float | None) -> Verdict:
    """pass/fail when the whole interval lies on one side of the limit, else undecided. Without
    an interval the value alone decides (a figure that has no sampling error, or one measured
    once where no interval could be formed is reported as such elsewhere)."""
    if interval is None:
        if value is None:
            return "fail"
        return "pass" if _holds(op, value, limit) else "fail"
    lo_ok, hi_ok = _holds(op, interval.low, limit), _holds(op, interval.high, limit)
    if lo_ok and hi_ok:
        return "pass"
    if not lo_ok and not hi_ok:
        return "fail"
    return "undecided"


def _holds(op: str, value: float, limit: float) -> bool:
    return {
        "<=": value <= limit,
        "<": value < limit,
        ">=": value >= limit,
        ">": value > limit,
        "==": value == limit,
    }[op]


def separable(a: Interval, b: Interval) -> bool:
    """Whether two figures differ beyond noise: their intervals do not overlap."""
    return a.high < b.low or b.high < a.low
