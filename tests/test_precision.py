"""Intervals and verdicts: exact confidence levels, distribution-free percentile intervals that
cover, "too few requests" where a percentile means nothing, "undecided" across a limit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from quantbench.precision import (
    bootstrap_mean_interval,
    judge,
    min_samples,
    quantile_interval,
    rate_interval,
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
