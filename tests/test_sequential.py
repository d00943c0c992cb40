"""The group-sequential boundary a point's repeated looks are tested at (sequential.py), and the
error rates the load process's looks keep with it, checked by simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from quantbench.load.race import race_levels
from quantbench.precision import pass_count, quantile_bounds
from quantbench.sequential import (
    constant_boundary,
    crossing_probability,
    look_schedule,
    nominal_level,
)
from quantbench.workloads.plan import Precision

# Pocock's constants for K equally spaced looks, one-sided 2.5 % (two-sided 5 %): Jennison &
# Turnbull, Group Sequential Methods with Applications to Clinical Trials (2000), Table 2.1
POCOCK = {1: 1.960, 2: 2.178, 3: 2.289, 4: 2.361, 5: 2.413, 10: 2.555, 15: 2.626, 20: 2.672}


@pytest.mark.parametrize("looks", sorted(POCOCK))
def test_the_boundary_is_pococks_for_equally_spaced_looks(looks: int) -> None:
    c = constant_boundary(range(1, looks + 1), 0.025)
    assert c == pytest.approx(POCOCK[looks], abs=1.5e-3)


def test_the_boundary_lies_between_one_look_and_bonferroni() -> None:
    schedule = look_schedule(12, 88, 4)
    c = constant_boundary(schedule, 0.025)
    assert norm.isf(0.025) < c < norm.isf(0.025 / len(schedule))
    # more looks at the same information spend more: the boundary rises
    assert constant_boundary(look_schedule(4, 88, 4), 0.025) > c
    # the nominal level is what each look is tested at
    assert nominal_level(schedule, 0.025) == pytest.approx(norm.sf(c))
    assert crossing_probability(c, schedule) == pytest.approx(0.025, abs=1e-6)


def test_the_boundary_spends_its_error_rate_on_brownian_paths() -> None:
    # the race's interval looks (12, 16, ..., 88 requests): the standardized partial sums of
    # 400,000 paths cross the boundary at some look as often as it says, within 3 standard errors
    schedule = np.array(look_schedule(12, 88, 4), dtype=float)
    alpha = 0.025 * 20 / 22
    c = constant_boundary(schedule, alpha)
    rng = np.random.default_rng(7)
    paths = 400_000
    steps = np.diff(np.concatenate([[0.0], schedule]))
    sums = np.cumsum(rng.standard_normal((paths, schedule.size)) * np.sqrt(steps), axis=1)
    crossed = float(np.mean((sums / np.sqrt(schedule) >= c).any(axis=1)))
    se = np.sqrt(alpha * (1 - alpha) / paths)
    assert abs(crossed - alpha) < 3 * se, (crossed, alpha)
    # Bonferroni's split of the same rate would have spent a third of it
    bonferroni = float(np.mean((sums / np.sqrt(schedule) >= norm.isf(alpha / 20)).any(axis=1)))
    assert bonferroni < 0.5 * alpha


def fail_rate(level: float, replicates: int, seed: int) -> tuple[float, float]:
    """How often the load process's fail looks (quantbench.load.dispatch: a p90's one-sided
    lower bound above its limit, at every 4th request up to 88) stop a point whose true p90 is
    exactly its limit, from skewed (lognormal) TTFTs; and the mean look a point 1.5x beyond
    the limit's p90 stops at."""
    rng = np.random.default_rng(seed)
    looks = look_schedule(4, 88, 4)
    limit = float(np.exp(norm.ppf(0.9)))  # the p90 of a standard lognormal
    # the lower bound is the (n - mirror + 1)-th smallest value: above the limit exactly when
    # at least `mirror` values are (quantbench.precision.quantile_bounds)
    mirror = {n: pass_count(n, 0.1, level) for n in looks}
    at_limit = rng.lognormal(size=(replicates, 88)) > limit
    counts = np.cumsum(at_limit, axis=1)
    shown = np.zeros(replicates, dtype=bool)
    for n in looks:
        if mirror[n] is not None:
            shown |= counts[:, n - 1] >= mirror[n]
    beyond = np.cumsum(rng.lognormal(size=(replicates, 88)) * 1.5 > limit, axis=1)
    stop = np.full(replicates, 88)
    for n in reversed(looks):
        if mirror[n] is not None:
            stop = np.where(beyond[:, n - 1] >= mirror[n], n, stop)
    return float(shown.mean()), float(stop.mean())


def test_the_fail_looks_keep_their_error_rate_and_stop_sooner() -> None:
    # the default point: 95 % over the 22 looks up to 88 requests
    level = Precision.fail_level(0.95, 88)
    bonferroni = 1 - 0.05 / 22
    assert 1 - level > 3 * (1 - bonferroni)
    replicates = 20_000
    wrong, stops = fail_rate(level, replicates, seed=1)
    se = np.sqrt(0.05 * 0.95 / replicates)
    # a point exactly at its limit is failed at most at the error rate (the order statistics'
    # discreteness makes each look stricter than its nominal level, never looser)
    assert wrong <= 0.05 + 3 * se, wrong
    old_wrong, old_stops = fail_rate(bonferroni, replicates, seed=1)
    assert old_wrong < wrong  # Bonferroni left error rate unspent...
    assert stops < old_stops - 2  # ...and a point beyond its limit ran longer to show it
    # the rule as simulated is quantile_bounds' own: one replicate, checked at one look
    xs = np.random.default_rng(3).lognormal(size=40) * 1.5
    bounds = quantile_bounds(xs.tolist(), 90, level)
    mirror = pass_count(40, 0.1, level)
    assert bounds is not None and mirror is not None and bounds.lower is not None
    limit = float(np.exp(norm.ppf(0.9)))
    assert (bounds.lower > limit) == (int((xs > limit).sum()) >= mirror)


def test_a_points_plan_carries_the_fail_level_its_looks_are_tested_at() -> None:
    p = Precision(targets=[], rel_half_width=0.15, confidence=0.95, min_measured=12,
                  max_measured=88)  # fmt: skip
    level, looks = p.fail_look_level()
    assert looks == 22 and level == pytest.approx(Precision.fail_level(0.95, 88))
    assert 0.990 < level < 0.994  # 0.80 % a look; Bonferroni's share would be 0.23 %
    carried = Precision(targets=[], rel_half_width=0.15, confidence=0.95, min_measured=12,
                        max_measured=88, fail_confidence=0.999)  # fmt: skip
    assert carried.fail_look_level() == (0.999, 22)


def test_the_race_spends_its_rate_on_the_interval_mostly() -> None:
    first, interval, ceiling_level = race_levels(12, 88, 0.95, 4)
    assert (1 - interval) / 2 > 3 * (1 - ceiling_level)  # the interval's looks, less strict
    # no interval look beyond the cap: one look at min_requests
    first, interval, ceiling_level = race_levels(12, 12, 0.95, 4)
    assert first == 4
    assert (1 - interval) / 2 == pytest.approx(0.025 / 3)
    assert 1 - ceiling_level == pytest.approx(0.025 / 3)


@pytest.mark.parametrize(
    "information, alpha",
    [([], 0.025), ([4, 4], 0.025), ([0, 4], 0.025), ([8, 4], 0.025), ([4, 8], 0.0), ([4], 0.7)],
)
def test_a_schedule_or_rate_that_makes_no_sense_is_refused(information, alpha) -> None:
    with pytest.raises(ValueError, match="information|alpha"):
        constant_boundary(information, alpha)


def test_the_look_schedule_is_every_few_requests() -> None:
    assert look_schedule(4, 20, 4) == [4, 8, 12, 16, 20]
    assert look_schedule(10, 22, 4) == [12, 16, 20]
    assert look_schedule(1, 7, 4) == [4]
