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
  That exactness holds for independent samples, and a closed loop's are not: gaps between tokens
  pooled over requests that share the server's decode steps move together, and so do the TTFTs
  of consecutive requests on a server whose state drifts (at a nominal 95 % such intervals
  covered 71-81 %). Given the values' times, the interval is widened by batch means: the
  indicator 1[x <= estimate] in time order is cut into :data:`RATE_SLICES` contiguous batches,
  the variance of its mean among the batches over the binomial one is the inflation f (never
  below 1: never narrower than the independent interval), and for f > 1 the ranks are
  n q -/+ t(B-1) sqrt(n q (1 - q) f).
* **a verdict against a limit** (an SLO): one-sided bounds at the confidence, each on its own
  (:class:`Bounds`). A pass must show the figure within its limit at the confidence, a fail that
  it is beyond: each a one-sided question, so the two-sided interval (which spends half its error
  on the side that cannot change the answer) would leave a configuration comfortably inside a
  p90 limit passing only when its slowest request is under it. The power of such a verdict, and
  the sample it needs, are exact binomial sums (:func:`power_to_pass`, :func:`sample_for_power`).
  These bounds assume independent values (see :func:`quantile_bounds` for why the batch-means
  widening is left out of them).
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

import functools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from quantbench.strict import Strict

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


@functools.lru_cache(maxsize=4096)
def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t critical value for ``confidence`` with ``df`` degrees of freedom.

    Cached: the decision's stability resampling asks for the same few (confidence, df) pairs
    about 100,000 times a report, and scipy's ``ppf`` costs a quarter of a millisecond a call
    (28 of a report test's 31 s on an AVX2-only EPYC)."""
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


class Bounds(Strict):
    """One-sided confidence bounds of a figure, each on its own at ``confidence``: the true value
    is at least ``lower`` with probability >= confidence, and at most ``upper`` likewise (the two
    together are a two-sided interval at 2 x confidence - 1, not at confidence). None: this sample
    gives no such bound (the p99 of 100 values has no upper bound at 95 %)."""

    lower: float | None
    upper: float | None
    confidence: float
    n: int
    method: str


def _finite_pairs(
    values: Sequence[float], times: Sequence[float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The values (and their times) without NaN; +inf is a value (a request never answered is
    infinitely late)."""
    xs = np.asarray([np.nan if v is None else v for v in values], dtype=float)
    keep = ~np.isnan(xs)
    if times is None:
        return xs[keep], None
    ts = np.asarray(times, dtype=float)
    if ts.shape != xs.shape:
        raise ValueError(f"{xs.size} values but {ts.size} times")
    return xs[keep], ts[keep]


def batch_inflation(
    values_in_time_order: np.ndarray, estimate: float, q: float, batches: int = RATE_SLICES
) -> float:
    """How much more the share of values at or below ``estimate`` varies than if the values were
    independent: the batch-means variance of the indicator's mean (``batches`` contiguous
    batches) over the binomial q(1 - q)/n, floored at 1 (never narrower than independence).

    1 below two values a batch: batches of one value cannot see any correlation, and their
    variance around the sample's own quantile is n/(n - 1) times the binomial one whatever the
    values, which would widen every small sample by the t factor for nothing."""
    n = int(values_in_time_order.size)
    if n < 2 * batches or not 0 < q < 1:
        return 1.0
    indicator = (values_in_time_order <= estimate).astype(float)
    means = np.array([b.mean() for b in np.array_split(indicator, batches)])
    var_of_mean = float(means.var(ddof=1)) / batches
    return max(1.0, var_of_mean / (q * (1 - q) / n))


def _inflated_ranks(n: int, q: float, tail: float, f: float) -> tuple[int, int]:
    """1-based ranks bounding the q-quantile with error ``tail`` on each side when the count of
    values below it varies f times the binomial variance: n q -/+ t(B-1) sqrt(n q (1 - q) f),
    t with the batches' degrees of freedom (f is estimated from them), clipped to the sample (an
    end beyond it is the extreme value: the sample's best, if short of the confidence)."""
    from scipy.stats import t

    half = float(t.ppf(1 - tail, RATE_SLICES - 1)) * math.sqrt(n * q * (1 - q) * f)
    return max(1, math.floor(n * q - half) + 1), min(n, math.ceil(n * q + half) + 1)


def quantile_interval(
    values: Sequence[float],
    percentile: float,
    confidence: float,
    times: Sequence[float] | None = None,
) -> Interval | None:
    """The ``percentile`` (0-100) of ``values`` with its distribution-free interval; None when
    there are too few values for one at ``confidence`` (see :func:`min_samples`).

    The point value is numpy's linear-interpolation percentile (what vLLM's benchmark reports).
    The interval is equal-tailed: with B ~ Binomial(n, q) the number of values below the true
    quantile, the r-th smallest value lies above it with probability P(B <= r - 1), so the lower
    end is the largest order statistic with that probability <= alpha/2, and symmetrically for
    the upper end: coverage >= confidence, exactly, whatever the distribution, for independent
    values. ``times`` (one per value) give their time order: then the interval is widened by the
    batch-means inflation of the values' correlation in time (see the module docstring); a
    widened end beyond the sample is the sample's extreme value.
    """
    from scipy.stats import binom

    xs, ts = _finite_pairs(values, times)
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
    order = np.argsort(xs, kind="stable")
    value = percentile_of_sorted(xs[order], percentile)
    method = "order statistics"
    f = 1.0 if ts is None else batch_inflation(xs[np.argsort(ts, kind="stable")], value, q)
    if f > 1:
        r_f, s_f = _inflated_ranks(n, q, alpha / 2, f)
        r, s = min(r, r_f), max(s, s_f)  # never narrower than the independent interval
        method = f"order statistics, batch-means variance (x {f:.2f})"
    xs = xs[order]
    return Interval(
        value=value, low=float(xs[r - 1]), high=float(xs[s - 1]), confidence=confidence, n=n,
        method=method,
    )  # fmt: skip


def pass_count(n: int, q: float, confidence: float) -> int | None:
    """The fewest of ``n`` values at or under a limit that show the ``q``-quantile there at
    ``confidence`` (one-sided): the smallest k with P(Binomial(n, q) >= k) <= alpha, i.e. the
    rank of the order statistic that is the quantile's one-sided upper bound. None when not even
    all n would (q^n > alpha: p90 below 29 values at 95 %)."""
    from scipy.stats import binom

    tails = binom.sf(np.arange(n + 1) - 1, n, q)  # tails[k] = P(B >= k), decreasing
    ok = np.nonzero(tails <= 1 - confidence)[0]
    return int(ok[0]) if ok.size else None


def _pass_counts(ns: np.ndarray, q: float, alpha: float) -> np.ndarray:
    """:func:`pass_count` for many n at once (n + 1 where none): scipy's quantile, then the same
    binomial tail as there checked on both sides of it (scipy's search works to a tolerance)."""
    from scipy.stats import binom

    ks = np.asarray(binom.ppf(1 - alpha, ns, q), dtype=float) + 1
    for _ in range(8):
        up = binom.sf(ks - 1, ns, q) > alpha  # P(B >= k) still above alpha
        down = ~up & (ks > 1) & (binom.sf(ks - 2, ns, q) <= alpha)  # k - 1 would do
        if not (up.any() or down.any()):
            break
        ks = ks + up - down
    return np.minimum(ks, ns + 1).astype(int)


def quantile_bounds(values: Sequence[float], percentile: float, confidence: float) -> Bounds | None:
    """The one-sided bounds of the ``percentile`` of ``values`` at ``confidence``; None without
    values. The upper bound is the k-th smallest value, k = :func:`pass_count`, so it lies within
    a limit exactly when at least k values do; the lower bound is its mirror image (the largest
    r with P(B <= r - 1) <= alpha).

    Exact for independent values. The batch-means widening of :func:`quantile_interval` is not
    applied here: its estimate of the inflation exceeds 1 by chance for a third to a half of
    independent samples, and its t factor then moves the p90's pass rank at 61 requests from
    59 to 61 (every request under the limit), which would cost most of a sized point's power.
    """
    xs, _ = _finite_pairs(values, None)
    n = int(xs.size)
    if n == 0:
        return None
    q = percentile / 100.0
    s = pass_count(n, q, confidence)
    mirror = pass_count(n, 1 - q, confidence)
    xs = np.sort(xs)
    return Bounds(
        lower=None if mirror is None else float(xs[n - mirror]),  # rank n + 1 - mirror
        upper=None if s is None else float(xs[s - 1]),
        confidence=confidence, n=n, method=f"order statistics, one-sided {confidence:.0%}",
    )  # fmt: skip


def proportion_bounds(k: int, n: int, confidence: float) -> Bounds | None:
    """One-sided Clopper-Pearson bounds of a proportion of k in n at ``confidence`` (the upper
    bound is within a limit L exactly when P(Binomial(n, L) <= k) <= alpha); None for n = 0."""
    from scipy.stats import beta

    if n == 0:
        return None
    alpha = 1 - confidence
    return Bounds(
        lower=0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1)),
        upper=1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k)),
        confidence=confidence, n=n, method=f"Clopper-Pearson, one-sided {confidence:.0%}",
    )  # fmt: skip


def power_to_pass(n: int, q: float, confidence: float, within: float) -> float:
    """The probability that ``n`` values pass a limit that at least a share ``q`` of them must
    meet (a pNN limit, or 1 - an error-rate limit) judged one-sided at ``confidence``, when a
    share ``within`` of them truly meets it: P(Binomial(n, within) >= :func:`pass_count`). 0
    when no outcome of n values could pass."""
    from scipy.stats import binom

    k = pass_count(n, q, confidence)
    return 0.0 if k is None else float(binom.sf(k - 1, n, within))


def sample_for_power(q: float, confidence: float, within: float, power: float) -> int | None:
    """The fewest values for which :func:`power_to_pass` reaches ``power``; None when q is not
    inside (0, 1) or within is not above q (no sample would). The power is not monotone in n
    (the pass count moves in whole values): a few more values can fall back slightly below."""
    from scipy.stats import binom

    if not 0 < q < 1 or not q < within <= 1:
        return None
    first, last = 1, 64
    while last <= 1 << 26:
        ns = np.arange(first, last + 1)
        ks = _pass_counts(ns, q, 1 - confidence)
        powers = np.where(ks <= ns, binom.sf(ks - 1, ns, within), 0.0)
        hits = np.nonzero(powers >= power)[0]
        if hits.size:
            return int(ns[hits[0]])
        first, last = last + 1, last * 4
    return None


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


def slice_totals(
    events: Sequence[tuple[float, float]], start: float, end: float, slices: int = RATE_SLICES
) -> np.ndarray:
    """The amounts of ``events`` (time, amount) in each of ``slices`` equal time slices of
    [start, end] (events outside it left out; one at ``end`` counts in the last slice)."""
    duration = end - start
    per_slice = np.zeros(slices)
    if duration <= 0:
        return per_slice
    for t, a in events:
        if start <= t <= end:
            per_slice[min(slices - 1, int((t - start) / duration * slices))] += a
    return per_slice


def slices_interval(rates: Sequence[float], value: float, confidence: float) -> Interval | None:
    """The batch-means interval of per-slice rates (Student t over the slices), ``value`` being
    the figure they bound."""
    t_int = t_interval(list(rates), confidence, method=f"batch means over {len(rates)} slices")
    if t_int is None:
        return None
    return Interval(
        value=value, low=t_int.low, high=t_int.high, confidence=confidence, n=len(rates),
        method=t_int.method,
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
    rates = slice_totals(events, start, end, slices) / (duration / slices)
    return slices_interval(rates, total / duration, confidence)


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
