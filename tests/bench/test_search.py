"""The SLO-edge search on scripted pass/fail surfaces with noise: it finds the edge, gives its
interval, and never claims a load it did not run and see pass."""

from __future__ import annotations

import random

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
    assert result.edge == 6 and result.interval == (6, 6)
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
    assert low <= result.edge <= high and low >= 1 and high <= 6


def test_the_interval_widens_with_disagreeing_runs() -> None:
    clean = [(4, True), (4, True), (5, False), (5, False)]
    noisy = [(4, True), (4, True), (5, True), (5, False), (6, False), (6, False)]
    assert edge_interval(clean) == (4, 4)
    low, high = edge_interval(noisy)
    assert (low, high) == (4, 5)


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
    assert reach_bound([(1, 40.0)], reach=8) == pytest.approx(320.0)
    # with a batch limit of 1 more clients only queue: 40 is all it can do
    assert reach_bound([(1, 40.0)], reach=1) == pytest.approx(40.0)
    # each concurrency takes the tightest bound measured at or below it: c=2 at 50 caps c=8 at 200
    assert reach_bound([(1, 40.0), (2, 50.0)], reach=8) == pytest.approx(200.0)
    # what was measured stands even above the reach
    assert reach_bound([(1, 40.0), (4, 90.0)], reach=2) == pytest.approx(90.0)
    assert reach_bound([], reach=8) is None
