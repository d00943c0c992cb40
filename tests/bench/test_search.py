"""The SLO-edge search on scripted pass/fail surfaces with noise: it finds the edge, gives its
interval, and never claims a load it did not run and see pass; and the race's bound."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from quantbench.bench.search import (
    edge_interval,
    edge_of,
    find_edge,
    isotonic_pass_rates,
    reach_bound,
)


def surface(rates: dict[int, float], seed: int):  # type: ignore[no-untyped-def]
    """passes(load) with the given pass probability per load (1 below, 0 above the table)."""
    rng = random.Random(seed)

    def passes(load: float) -> bool:
        p = rates.get(int(load), 1.0 if load < min(rates) else 0.0)
        return rng.random() < p

    return passes


def claims_only_what_it_ran(result) -> None:  # type: ignore[no-untyped-def]
    passed = {load for load, ok in result.tried if ok}
    assert result.edge is None or result.edge in passed
    if result.interval is not None:
        ran = {load for load, _ in result.tried}
        assert set(result.interval) <= ran


def test_isotonic_fit_pools_a_pass_above_a_fail() -> None:
    fitted = isotonic_pass_rates([(1, True), (2, False), (4, True), (8, False)])
    assert fitted == {1: 1.0, 2: 0.5, 4: 0.5, 8: 0.0}
    assert edge_of([(1, True), (2, False), (4, True), (8, False)]) == 4
    assert edge_of([(1, False), (2, False)]) is None
    # a load never seen passing is never the edge, whatever its neighbours say
    assert edge_of([(1, True), (1, True), (2, False), (2, True), (3, False)]) == 2


def test_monotone_surface_with_a_cliff() -> None:
    result = find_edge(surface({6: 1.0, 7: 0.0}, seed=1), 1, 32)
    # two runs each way at 6 and 7 cannot tell a cliff from a steep curve: the interval may hold
    # the load above, never more
    assert result.edge == 6 and result.interval == (6, 7)
    claims_only_what_it_ran(result)
    assert result.runs < 32 / 2  # at most half the grid's runs


def test_one_unlucky_fail_below_the_edge_does_not_stop_the_search() -> None:
    # The old search stopped growing at the first fail: a noisy fail at 2 gave an edge of 1.
    outcomes = iter([True, False])  # 1 passes, 2 fails once by bad luck, then behaves

    def passes(load: float) -> bool:
        forced = next(outcomes, None)
        return forced if forced is not None else load <= 12

    result = find_edge(passes, 1, 64)
    assert result.edge == 12
    claims_only_what_it_ran(result)
    assert find_edge(iter_passes([True, False], 12), 1, 64, confirm=0).edge == 1  # the old way


def iter_passes(first: list[bool], edge: int):  # type: ignore[no-untyped-def]
    outcomes = iter(first)

    def passes(load: float) -> bool:
        forced = next(outcomes, None)
        return forced if forced is not None else load <= edge

    return passes


def test_one_lucky_pass_above_the_edge_is_outvoted() -> None:
    calls = {"n": 0}

    def passes(load: float) -> bool:  # 8 passes once by luck on its first run; the edge is 5
        calls["n"] += 1
        return load <= 5 or (load == 8 and calls["n"] == 4)

    result = find_edge(passes, 1, 16, confirm=2)
    assert result.edge == 5
    claims_only_what_it_ran(result)


@pytest.mark.parametrize("seed", range(12))
def test_noisy_edge_stays_in_the_noisy_band_with_an_interval(seed: int) -> None:
    # passes surely up to 4, half the time at 5 and 6, never from 7 on
    rates = {4: 1.0, 5: 0.5, 6: 0.5, 7: 0.0}
    result = find_edge(surface(rates, seed), 1, 32, confirm=2)
    assert result.edge in (4, 5, 6)
    claims_only_what_it_ran(result)
    assert result.interval is not None
    low, high = result.interval
    # it may reach 8, above the band: 8 ran once, and one failed run does not rule it out
    assert low <= result.edge <= high and low >= 1 and high <= 8


def test_the_interval_widens_with_disagreeing_runs() -> None:
    clean = [(4, True), (4, True), (5, False), (5, False)]
    noisy = [(4, True), (4, True), (5, True), (5, False), (6, False), (6, False)]
    assert edge_interval(clean) == (4, 5)
    assert edge_interval(noisy) == (4, 6)
    assert edge_interval(noisy) == edge_interval(noisy)  # seeded: the same runs, the same interval


def test_a_load_run_once_is_not_taken_as_certain() -> None:
    # Resampling each load's own runs gave a load run once its one outcome every time, so one run
    # per load and a pass at 5 under a fail at 6 gave the interval [5, 5]: the edge, as if sure.
    tried = [(1, True), (2, True), (4, True), (8, False), (6, False), (5, True)]
    assert edge_of(tried) == 5
    low, high = edge_interval(tried)
    assert low < 5 < high and {low, high} <= {load for load, _ in tried}


@pytest.mark.parametrize("top", [16, 64])
def test_a_clean_cliff_keeps_its_interval_within_one_load(top: int) -> None:
    for edge in range(1, top + 1):
        low, high = find_edge(lambda load, e=edge: load <= e, 1, top).interval
        assert edge - 1 <= low <= edge <= high <= edge + 1, (edge, low, high)


def gradual(middle: float, steepness: float = 8.0) -> Callable[[float], float]:
    """A load's pass probability falling smoothly: logistic in log load, one half at ``middle``
    (steepness 8: from 0.9 to 0.1 over a factor of 1.7 in load, e.g. from 6 to 10 streams)."""

    def chance(load: float) -> float:
        return 1 / (1 + math.exp(steepness * (math.log(load) - math.log(middle))))

    return chance


def test_the_interval_covers_the_edge_of_a_gradual_pass_curve() -> None:
    # The true edge is the highest load that passes at least half the time. With one run per
    # load the old interval was the edge alone in 40 % of searches and covered the true edge in
    # 80 % (its single loads missed a third of the time); drawn from a smoothed fit, 90 % or more.
    rng = random.Random(0)
    covered = searches = 0
    for _ in range(200):
        chance = gradual(math.exp(rng.uniform(math.log(1.5), math.log(14))))
        truth = max(c for c in range(1, 17) if chance(c) >= 0.5)
        draws = random.Random(rng.random())
        result = find_edge(lambda load, c=chance, d=draws: d.random() < c(load), 1, 16)
        if result.interval is not None:
            searches += 1
            covered += result.interval[0] <= truth <= result.interval[1]
    assert covered / searches >= 0.9, covered / searches


def test_a_budget_stops_the_search_with_what_it_has() -> None:
    result = find_edge(lambda load: load <= 40, 1, 64, max_runs=4)
    assert result.runs == 4 and result.edge == 8  # 1, 2, 4, 8 passed; 16 was never run
    claims_only_what_it_ran(result)


def test_a_setting_that_cannot_win_stops_at_once_and_says_why() -> None:
    # The race across settings: after each run the caller may give up (the setting's bound is
    # below the leader); the search stops there, keeps what it ran and says why.
    asked = []

    def give_up() -> str | None:
        asked.append(1)
        return "cannot reach the leader" if len(asked) >= 2 else None

    result = find_edge(lambda load: load <= 40, 1, 64, give_up=give_up)
    assert result.runs == 2 and result.dropped == "cannot reach the leader"
    assert result.edge == 2  # 1 and 2 ran and passed; nothing above was claimed
    claims_only_what_it_ran(result)
    assert find_edge(lambda load: load <= 40, 1, 64, give_up=lambda: None).dropped is None


def test_the_throughput_bound_scales_with_streams_up_to_the_reach() -> None:
    # c=1 measured at most 40 tok/s: c streams deliver at most 40 c (a stream gets no faster)
    assert reach_bound([(1, 40.0, 1.0)], reach=8) == pytest.approx(320.0)
    # each concurrency takes the tightest bound measured at or below it: c=2 at 50 caps c=8 at 200
    assert reach_bound([(1, 40.0, 1.0), (2, 50.0, 2.0)], reach=8) == pytest.approx(200.0)
    # what was measured stands even above the reach
    assert reach_bound([(1, 40.0, 1.0), (4, 90.0, 4.0)], reach=2) == pytest.approx(90.0)
    assert reach_bound([], reach=8) is None


def test_a_batch_limit_without_think_time_caps_as_before() -> None:
    # Streams always in flight: a batch limit of 1 serves one at a time, more clients only queue
    assert reach_bound([(1, 40.0, 1.0)], reach=8, max_batch=1) == pytest.approx(40.0)
    assert reach_bound([(1, 40.0, None)], reach=8, max_batch=1) == pytest.approx(40.0)  # unknown
    # 2 streams at most 60 with 4 slots: 4 streams at most 120, and no more beyond
    assert reach_bound([(2, 60.0, 2.0)], reach=8, max_batch=4) == pytest.approx(120.0)
    # measured above the limit (4 streams, 2 slots): the engine was full, 50 is all it does
    assert reach_bound([(4, 50.0, 4.0)], reach=8, max_batch=2) == pytest.approx(50.0)


def test_streams_that_think_can_fill_a_batch_limit() -> None:
    # A multi-turn stream at one slot kept 0.44 requests in flight (it thinks between turns): the
    # slot sat idle 56 % of the time, and 4 such streams delivered 2.27x what one did. The bound
    # capped at the batch limit said 1x, and the race skipped the setting that would have won.
    bound = reach_bound([(1, 40.0, 0.44)], reach=4, max_batch=1)
    assert bound is not None and bound >= 2.27 * 40.0
    assert bound == pytest.approx(40.0 / 0.44)  # one request served at once, at 40/0.44 each
    # per stream it is never more than 4 streams of what one delivered
    assert reach_bound([(1, 40.0, 0.1)], reach=4, max_batch=1) == pytest.approx(160.0)
    # above the limit some of what was in flight queued: 4 streams on 2 slots with 3.5 in flight
    # had at least 3.5 x 2/4 served at once on average, so 2 served deliver at most 50 / 1.75 x 2
    assert reach_bound([(4, 50.0, 3.5)], reach=8, max_batch=2) == pytest.approx(50 / 1.75 * 2)
    # on 1 slot, 1.5 in flight: at least 1.5 x 1/4 served, at most 50 / 0.375 = 133 at once,
    # looser than 8 streams of what 4 delivered (100): the per-stream bound stands
    assert reach_bound([(4, 50.0, 1.5)], reach=8, max_batch=1) == pytest.approx(100.0)
