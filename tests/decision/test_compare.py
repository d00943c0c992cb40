"""Comparisons through the interval on a ratio (quantbench.decision.compare)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantbench.decision.compare import Contrast, LogEstimate, critical, pooled, ratio
from quantbench.precision import Figure, t_interval


def fig(
    value: float, rel: float, n: int = 10, method: str = "batch means over 10 slices"
) -> Figure:
    return Figure(
        value=value, low=value * (1 - rel), high=value * (1 + rel), confidence=0.95, n=n,
        method=method,
    )  # fmt: skip


def test_a_batch_means_interval_gives_its_t_standard_error() -> None:
    est = LogEstimate.of(fig(100.0, 0.10))
    assert est is not None and est.df == 9
    # the wider (lower) side of the log interval over t_9
    assert est.se == pytest.approx(-math.log(0.9) / critical(0.95, 9))


def test_a_16_percent_gap_with_10_percent_intervals_is_a_difference_not_a_tie() -> None:
    """Overlapping 95 % intervals ([90, 110] and [77.4, 94.6]) are no tie: the ratio's interval
    lies below 1."""
    a, b = LogEstimate.of(fig(100.0, 0.10)), LogEstimate.of(fig(84.0, 0.10))
    assert a is not None and b is not None
    c = ratio(b, a)
    _low, high = c.interval(0.95)
    assert high < 1 and c.verdict(0.05, 0.95) == "slower"
    # drift widens it: with a large drift the same figures are not yet separable
    assert ratio(b, a, drift=0.04).verdict(0.05, 0.95) == "slower"
    assert ratio(b, a, drift=0.10).verdict(0.05, 0.95) == "not yet separable"


def test_the_default_runs_two_leaders_differ_beyond_noise() -> None:
    """docs/RESULTS.md's chat rows: W8A8 on vLLM 91.3 [80.6, 102.0] and Q4_K_M on llama.cpp
    76.4 [68.8, 83.9] good tok/s overlap, yet their ratio 0.84 lies below 1 even with 4 % drift
    (p about 0.03): Q4_K_M is slower, not tied."""
    w8a8 = Figure(value=91.3, low=80.6, high=102.0, confidence=0.95, n=10,
                  method="batch means over 10 slices")  # fmt: skip
    q4 = Figure(value=76.4, low=68.8, high=83.9, confidence=0.95, n=10,
                method="batch means over 10 slices")  # fmt: skip
    a, b = LogEstimate.of(q4), LogEstimate.of(w8a8)
    assert a is not None and b is not None
    c = ratio(a, b, drift=0.04)
    assert c.ratio == pytest.approx(76.4 / 91.3)
    assert c.verdict(0.05, 0.95) == "slower"


def test_equivalent_only_when_the_whole_interval_is_inside_the_margin() -> None:
    tight = Contrast(math.log(1.01), 0.005, 1e6, "x")
    assert tight.verdict(0.05, 0.95) == "equivalent"
    wide = Contrast(math.log(1.01), 0.05, 1e6, "x")
    assert wide.verdict(0.05, 0.95) == "not yet separable"
    assert Contrast(math.log(1.2), 0.01, 1e6, "x").verdict(0.05, 0.95) == "faster"


def test_the_ratio_interval_covers_at_its_confidence_with_drift() -> None:
    """Two batch-means measurements of configurations 10 % apart, each run also drifting by a
    random 4 %/sqrt(2) level: the interval with drift added covers the true ratio ~95 % of the
    time; without the drift term it falls well short."""
    rng = np.random.default_rng(7)
    true = math.log(0.9)
    cover_with = cover_without = 0
    trials = 1500
    for _ in range(trials):
        figs = []
        for level in (100.0, 90.0):
            shift = rng.normal(0, 0.04 / math.sqrt(2))
            slices = level * math.exp(shift) * (1 + rng.normal(0, 0.05, 10))
            iv = t_interval(list(slices), 0.95, method="batch means over 10 slices")
            assert iv is not None
            figs.append(iv)
        a, b = LogEstimate.of(figs[1]), LogEstimate.of(figs[0])
        assert a is not None and b is not None
        for drift, hits in ((0.04, "with"), (0.0, "without")):
            low, high = ratio(a, b, drift).interval(0.95)
            if math.log(low) <= true <= math.log(high):
                if hits == "with":
                    cover_with += 1
                else:
                    cover_without += 1
    assert cover_with / trials >= 0.93
    assert cover_without / trials < 0.90


def test_pooled_rounds_estimate_the_drift_between_blocks() -> None:
    same = [Contrast(math.log(0.9), 0.02, 9, "round") for _ in range(4)]
    one = pooled(same)
    assert one is not None and one.ratio == pytest.approx(0.9)
    assert "drift between blocks 0.0%" in one.how
    # two blocks that disagree beyond their own errors: the spread between them is drift
    spread = [Contrast(math.log(x), 0.01, 9, "round") for x in (0.85, 0.85, 0.95, 0.95)]
    wide = pooled(spread)
    assert wide is not None and wide.se > 0.04
    assert "one round" in pooled([Contrast(0.1, 0.02, 9, "r")]).how  # type: ignore[union-attr]


def test_a_block_of_two_rounds_cancels_a_linear_drift() -> None:
    """A then B, then B then A, on a machine slowing linearly: each round's ratio is biased by
    the drift between its two measurements, in opposite directions; the block's is not."""
    first = Contrast(math.log(1.032), 0.01, 9, "ab")
    second = Contrast(math.log(0.967), 0.01, 9, "ba")
    both = pooled([first, second])
    assert both is not None and abs(both.log_ratio) < 0.002
    assert "one block" in both.how


def test_equivalence_is_read_by_the_two_one_sided_tests() -> None:
    """Item 5: equivalence was read at the difference test's two-sided interval (95 %), which
    asks twice the evidence the two one-sided tests need; now at 2 x level - 1 (90 %). A ratio
    of 1.00 with a standard error of 2.7 % is shown within ±5 % (its 90 % interval [0.957,
    1.045]), not by its 95 % one [0.948, 1.054]."""
    c = Contrast(0.0, 0.027, 1e6, "x")
    assert c.verdict(0.05, 0.95) == "equivalent"
    low, high = c.interval(0.95)
    assert low < 1 / 1.05 and high > 1.05  # the old reading: not yet separable
    looked = Contrast(0.0, 0.027, 1e6, "x", level=0.9755)  # a duel's look: at 2 x 0.9755 - 1
    assert looked.equivalence_interval(0.95) == pytest.approx(
        Contrast(0.0, 0.027, 1e6, "x").interval(0.951)
    )


def test_rows_measured_apart_cannot_be_shown_equivalent_within_the_drift() -> None:
    """Item 5: with 4 % drift even error-free rows give [0.936, 1.068] (90 %): never inside
    ±5 %, so only paired rounds can show equivalence; below 2.97 % drift they can."""
    from quantbench.decision.compare import rows_can_be_equivalent

    exact = LogEstimate.exact(100.0)
    c = ratio(exact, exact, drift=0.04)
    assert c.equivalence_interval(0.95) == pytest.approx((0.936, 1.068), abs=1e-3)
    assert c.verdict(0.05, 0.95) == "not yet separable"
    assert not rows_can_be_equivalent(0.04, 0.05, 0.95)
    assert rows_can_be_equivalent(0.029, 0.05, 0.95)
    assert ratio(exact, exact, drift=0.029).verdict(0.05, 0.95) == "equivalent"
