"""Intervals and verdicts: exact confidence levels, distribution-free percentile intervals that
cover (independent samples exactly, a closed loop's correlated ones by batch means), "too few
requests" where a percentile means nothing, "undecided" across a limit, one-sided bounds and the
power of a verdict."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from quantbench.precision import (
    batch_inflation,
    bootstrap_mean_interval,
    judge,
    min_samples,
    pass_count,
    percentile_of_sorted,
    power_to_pass,
    proportion_bounds,
    quantile_bounds,
    quantile_interval,
    rate_interval,
    sample_for_power,
    separable,
    t_interval,
    t_quantile,
)


def test_t_interval_by_hand() -> None:
    iv = t_interval([10.0, 12.0, 14.0], 0.95)
    assert iv is not None and iv.value == 12.0
    assert iv.half_width == pytest.approx(4.302653 * 2.0 / math.sqrt(3), rel=1e-6)
    assert t_interval([5.0], 0.95) is None and t_interval([float("nan"), 1.0], 0.95) is None


@pytest.mark.parametrize("confidence", [0.8, 0.93, 0.975])
def test_a_requested_confidence_level_is_used_as_it_is(confidence: float) -> None:
    # The old table rounded every level to 0.90, 0.95 or 0.99: 0.8 got 0.90's wider interval.
    for df in (1, 4, 29, 200):
        assert t_quantile(confidence, df) == pytest.approx(stats.t.ppf((1 + confidence) / 2, df))
    nearest = min((0.90, 0.95, 0.99), key=lambda c: abs(c - confidence))
    assert t_quantile(confidence, 4) != pytest.approx(t_quantile(nearest, 4), rel=1e-3)
    iv = t_interval([1.0, 2.0, 4.0, 8.0], confidence)
    assert iv is not None and iv.confidence == confidence


def test_minimum_samples_for_a_percentile() -> None:
    assert min_samples(0.5, 0.95) == 6
    assert min_samples(0.95, 0.95) == 72
    assert min_samples(0.99, 0.95) == 368
    # at that size the extreme order statistic has just enough probability to bound the tail
    assert 0.99**368 <= 0.025 < 0.99**367


def test_too_few_requests_for_a_tail_percentile_give_no_number() -> None:
    xs = list(np.random.default_rng(0).exponential(1.0, size=50))
    assert quantile_interval(xs, 50, 0.95) is not None
    assert quantile_interval(xs, 99, 0.95) is None  # 50 < 368: "too few requests for p99"
    assert quantile_interval(xs[:5], 50, 0.95) is None


def test_percentile_interval_covers_at_its_confidence() -> None:
    # Skewed latencies (lognormal); the interval must hold the true quantile >= 95 % of the time.
    rng = np.random.default_rng(7)
    true_p90 = float(stats.lognorm.ppf(0.9, s=0.8))
    hits = trials = 0
    for _ in range(600):
        xs = rng.lognormal(0.0, 0.8, size=80)
        iv = quantile_interval(list(xs), 90, 0.95)
        assert iv is not None and iv.low <= iv.value <= iv.high
        trials += 1
        hits += iv.low <= true_p90 <= iv.high
    assert hits / trials >= 0.93  # exact coverage >= 0.95; 600 trials leave ~1 % of noise


def test_an_unanswered_request_is_infinitely_late() -> None:
    xs = [0.1] * 20 + [math.inf] * 20
    iv = quantile_interval(xs, 90, 0.95)
    assert iv is not None and iv.value == math.inf and iv.high == math.inf


def test_bootstrap_mean_is_seeded() -> None:
    xs = [1.0, 2.0, 3.0, 10.0]
    a, b = bootstrap_mean_interval(xs, 0.9), bootstrap_mean_interval(xs, 0.9)
    assert a == b and a is not None and a.low < 4.0 < a.high


def test_rate_interval_by_batch_means() -> None:
    # a steady 100 tokens/s for 10 s, one token every 10 ms
    events = [(i / 100, 1.0) for i in range(1000)]
    iv = rate_interval(events, 0.0, 10.0, 0.95)
    assert iv is not None and iv.value == pytest.approx(100.0, rel=0.01)
    assert iv.half_width < 2.0
    bursty = [(t, 10.0 if int(t) % 2 else 0.0) for t, _ in events]
    wide = rate_interval(bursty, 0.0, 10.0, 0.95)
    assert wide is not None and wide.half_width > 100


def test_a_verdict_whose_interval_straddles_the_limit_is_undecided() -> None:
    iv = t_interval([0.4, 0.5, 0.6], 0.95)
    assert judge("<=", 0.5, iv, 0.5) == "undecided"
    assert judge("<=", 2.0, iv, 0.5) == "pass"
    assert judge("<=", 0.01, iv, 0.5) == "fail"
    assert judge("<=", 1.0, None, 0.5) == "pass" and judge("<=", 1.0, None, None) == "fail"


def test_separable() -> None:
    a, b = t_interval([1.0, 1.1, 0.9], 0.95), t_interval([5.0, 5.1, 4.9], 0.95)
    c = t_interval([1.0, 1.5, 0.5], 0.95)
    assert a is not None and b is not None and c is not None
    assert separable(a, b) and not separable(a, c)


# -- one-sided bounds and power (a verdict against a limit) -------------------------------------


def test_one_sided_bounds_are_order_statistics() -> None:
    xs = [float(v) for v in range(1, 11)]
    b = quantile_bounds(xs, 50, 0.95)
    # P(Binomial(10, 0.5) >= 9) = 1.1 % <= 5 % < P(>= 8) = 5.5 %: the 9th value; mirror: the 2nd
    assert b is not None and (b.lower, b.upper, b.n) == (2.0, 9.0, 10)
    assert pass_count(61, 0.9, 0.95) == 59  # a p90 passes with 59 of 61 values under the limit
    assert stats.binom.sf(58, 61, 0.9) <= 0.05 < stats.binom.sf(57, 61, 0.9)
    assert pass_count(28, 0.9, 0.95) is None  # 0.9^28 > 5 %: not even 28 of 28 would
    p99 = quantile_bounds(xs * 10, 99, 0.95)
    assert p99 is not None and p99.upper is None and p99.lower is not None
    errors = proportion_bounds(2, 61, 0.95)
    assert errors is not None and errors.upper == pytest.approx(stats.beta.ppf(0.95, 3, 59))
    assert errors.upper <= 0.1 < stats.beta.ppf(0.975, 3, 59)  # one-sided within, two-sided not


def test_the_power_of_a_verdict_and_the_sample_it_needs_are_exact_binomial_sums() -> None:
    # design alternative: a quarter of the allowed tail beyond the limit (p90 -> p97.5)
    need = {q: sample_for_power(q, 0.95, 1 - (1 - q) / 4, 0.8) for q in (0.5, 0.9, 0.95, 0.99)}
    assert need == {0.5: 11, 0.9: 61, 0.95: 153, 0.99: 773}
    assert power_to_pass(61, 0.9, 0.95, 0.975) == pytest.approx(stats.binom.sf(58, 61, 0.975))
    assert power_to_pass(61, 0.9, 0.95, 0.975) >= 0.8 > power_to_pass(60, 0.9, 0.95, 0.975)
    assert power_to_pass(100, 0.99, 0.95, 0.9975) == 0.0  # no outcome of 100 passes a p99


# -- closed-loop samples are not independent (batch means) ---------------------------------------


def _ar1(rng: np.random.Generator, n: int, rho: float) -> np.ndarray:
    """A stationary AR(1) series with unit variance."""
    z = np.empty(n)
    z[0] = rng.standard_normal()
    shocks = rng.standard_normal(n) * math.sqrt(1 - rho**2)
    for i in range(1, n):
        z[i] = rho * z[i - 1] + shocks[i]
    return z


Draw = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]


def _coverage(draw: Draw, truth: float, percentile: float, replicates: int) -> tuple[float, float]:
    """Coverage of the interval without the values' times (as if independent) and with them."""
    rng = np.random.default_rng(11)
    plain = timed = 0
    for _ in range(replicates):
        values, times = draw(rng)
        a = quantile_interval(values, percentile, 0.95)
        b = quantile_interval(values, percentile, 0.95, times)
        assert a is not None and b is not None and b.low <= a.low and a.high <= b.high
        plain += a.low <= truth <= a.high
        timed += b.low <= truth <= b.high
    return plain / replicates, timed / replicates


def test_pooled_gaps_of_requests_sharing_decode_steps_are_covered() -> None:
    # 4 concurrent requests of 30 gaps each; every decode step serves all four, so its gap is
    # the step's time (an AR(1) noise shared by the four, rho 0.5) with a little of each
    # request's own. The gaps' median is the base step time: log-gaps are centred normal.
    base = 0.02

    def draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        step = 0.3 * _ar1(rng, 30, 0.5)
        gaps = base * np.exp(step[:, None] + 0.05 * rng.standard_normal((30, 4)))
        arrivals = rng.uniform(0, base, 4) + np.cumsum(gaps, axis=0)  # chunk times
        return gaps.ravel(), arrivals.ravel()

    plain, timed = _coverage(draw, base, 50, 300)
    assert timed >= 0.9  # 0.92 with these draws; nominal 0.95
    assert plain <= 0.7  # 0.51: 120 gaps hold little more than 30 steps' worth


def test_serially_correlated_ttft_p90_is_covered() -> None:
    # 60 requests one at a time on a server whose state drifts: log-TTFT an AR(1), rho 0.6
    truth = math.exp(0.5 * stats.norm.ppf(0.9))

    def draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return np.exp(0.5 * _ar1(rng, 60, 0.6)), np.arange(60.0)

    plain, timed = _coverage(draw, truth, 90, 1000)
    assert timed >= 0.89  # 0.92 with these draws; nominal 0.95
    assert plain <= 0.87  # 0.85


def test_independent_values_keep_the_exact_interval() -> None:
    rng = np.random.default_rng(3)
    xs = rng.lognormal(0.0, 0.8, size=80)
    exact = quantile_interval(list(xs), 90, 0.95)
    cdf = stats.binom.cdf(np.arange(81), 80, 0.9)
    r = int(np.nonzero(cdf <= 0.025)[0][-1]) + 1
    s = int(np.nonzero(cdf >= 0.975)[0][0]) + 1
    ordered = np.sort(xs)
    assert exact is not None and exact.method == "order statistics"
    assert (exact.low, exact.high) == (ordered[r - 1], ordered[s - 1])
    # in time order, a sample whose batches vary no more than independence gives it exactly
    for seed in range(50):
        ys = np.random.default_rng(seed).lognormal(0.0, 0.8, size=80)
        estimate = percentile_of_sorted(np.sort(ys), 90)
        if batch_inflation(ys, estimate, 0.9) == 1.0:
            break
    assert quantile_interval(list(ys), 90, 0.95, np.arange(80.0)) == quantile_interval(
        list(ys), 90, 0.95
    )
    # and one whose batches vary more by chance is widened, never narrowed, and says so
    widened = quantile_interval(list(xs[np.argsort(xs)]), 50, 0.95, np.arange(80.0))
    plain = quantile_interval(list(xs), 50, 0.95)
    assert widened is not None and plain is not None
    assert widened.low <= plain.low and plain.high <= widened.high
    assert widened.method.startswith("order statistics, batch-means variance (x ")
