"""SLO-edge search: the highest load that still meets every SLO, and how sure that is.

A full grid runs every load level; the search runs a handful. It doubles the load until a point
fails (or the maximum is reached), then bisects between the last pass and the first fail, like
GuideLLM's goodput search. One pass or fail is one noisy sample, though: a single unlucky point
below the edge would stop the growth there, and a lucky one above it would be taken as the edge.
So every verdict is read through an **isotonic fit** (pool adjacent violators): the pass rate is
taken to fall with load, each load's estimate pools its neighbours' runs where they disagree, and
the edge is the highest load whose fitted pass rate is at least one half *and* that passed in a
run of its own (the search never reports a load it did not run and see pass). Then the two loads
that bracket the edge are measured again (``confirm`` times): a fail that was noise is outvoted and
the search goes on upward from it; a pass that was luck is outvoted and the search bisects below.
The edge's interval is a bootstrap over the runs (each load's outcomes resampled, the fit and the
edge taken again), like AIPerf's; with one run per load and a clean cliff it is the edge itself.

The runs it took are reported next to the grid's size, so the saving is visible.

Across server settings the search races (``give_up``): a setting stops as soon as what it measured
shows it cannot reach the leader found so far beyond noise (:func:`reach_bound`), so runs go where
they can still change the answer, as successive halving would, without restarting any server.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

PASS_RATE = 0.5
"""A load passes when its fitted pass rate is at least this."""
BOOTSTRAP_RESAMPLES = 400


@dataclass
class EdgeResult:
    """The highest passing load (None if none passed), every run in order, the fit, the interval."""

    edge: float | None
    tried: list[tuple[float, bool]] = field(default_factory=list)
    fitted: dict[float, float] = field(default_factory=dict)
    """Load -> isotonic pass rate over every run."""
    interval: tuple[float, float] | None = None
    """Bootstrap interval of the edge over tried loads (None: no load passed)."""
    confidence: float = 0.95
    dropped: str | None = None
    """Why the search stopped before its edge was settled (``give_up``'s reason), if it did."""

    @property
    def runs(self) -> int:
        return len(self.tried)


def isotonic_pass_rates(tried: list[tuple[float, bool]]) -> dict[float, float]:
    """Pass rates per load, non-increasing in load, closest (least squares) to the runs' own."""
    loads = sorted({load for load, _ in tried})
    blocks: list[list[float]] = []  # [passes, runs, first load index, last load index]
    for i, load in enumerate(loads):
        outcomes = [ok for x, ok in tried if x == load]
        blocks.append([float(sum(outcomes)), float(len(outcomes)), i, i])
        # a block that passes more often than the one below it violates the order: pool them
        while len(blocks) > 1 and blocks[-1][0] / blocks[-1][1] > blocks[-2][0] / blocks[-2][1]:
            top = blocks.pop()
            blocks[-1][0] += top[0]
            blocks[-1][1] += top[1]
            blocks[-1][3] = top[3]
    fitted: dict[float, float] = {}
    for passes, runs, first, last in blocks:
        for i in range(int(first), int(last) + 1):
            fitted[loads[i]] = passes / runs
    return fitted


def edge_of(tried: list[tuple[float, bool]]) -> float | None:
    """The highest load whose fitted pass rate is >= one half and that passed at least once."""
    fitted = isotonic_pass_rates(tried)
    passed = {load for load, ok in tried if ok}
    ok = [load for load, rate in fitted.items() if rate >= PASS_RATE and load in passed]
    return max(ok) if ok else None


def edge_interval(
    tried: list[tuple[float, bool]],
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap of the edge: each load's runs resampled with replacement."""
    by_load: dict[float, list[bool]] = {}
    for load, ok in tried:
        by_load.setdefault(load, []).append(ok)
    rng = random.Random(seed)
    edges: list[float] = []
    for _ in range(resamples):
        sample = [(load, rng.choice(runs)) for load, runs in by_load.items() for _ in runs]
        edge = edge_of(sample)
        edges.append(edge if edge is not None else 0.0)
    if all(e == 0.0 for e in edges):
        return None
    edges.sort()
    tail = (1 - confidence) / 2
    low = edges[int(tail * (len(edges) - 1))]
    high = edges[round((1 - tail) * (len(edges) - 1))]
    tried_loads = sorted(by_load)
    # the interval's ends are loads that were run (0 stands for "none passed")
    return (low if low else tried_loads[0], high)


def find_edge(
    passes: Callable[[float], bool],
    start: float,
    maximum: float,
    *,
    integer: bool = True,
    precision: float = 0.1,
    confirm: int = 1,
    max_runs: int | None = None,
    confidence: float = 0.95,
    give_up: Callable[[], str | None] | None = None,
) -> EdgeResult:
    """Search [start, maximum] for the largest load where ``passes(load)`` holds (see the module
    docstring). ``confirm``: extra runs of each of the two loads around the edge (0: one run per
    load, the plain grow-then-bisect). ``max_runs``: stop there whatever the state. ``give_up``,
    asked after every run: a reason to stop now (the setting cannot win), or None to go on.

    integer: loads are whole numbers (concurrency) and the bracket closes at adjacent integers;
    otherwise (rates) when (high - low) / high <= precision.
    """
    result = EdgeResult(edge=None, confidence=confidence)
    budget = max_runs if max_runs is not None else 10_000

    def run(load: float) -> None:
        result.tried.append((load, passes(load)))
        if give_up is not None and result.dropped is None:
            result.dropped = give_up()

    def out_of_runs() -> bool:
        return result.runs >= budget or result.dropped is not None

    def verdict(load: float) -> bool | None:
        """The load's fitted verdict, running it first if it never ran (None: out of budget)."""
        if all(x != load for x, _ in result.tried):
            if out_of_runs():
                return None
            run(load)
        return isotonic_pass_rates(result.tried)[load] >= PASS_RATE

    def closed(low: float, high: float) -> bool:
        return high - low <= 1 if integer else (high - low) / high <= precision

    def midpoint(low: float, high: float) -> float:
        return float((int(low) + int(high)) // 2) if integer else (low + high) / 2

    low: float | None = None  # highest load believed to pass
    high: float | None = None  # lowest load believed to fail
    load = start
    confirmed: set[float] = set()
    while not out_of_runs():
        if high is None:  # grow
            ok = verdict(load)
            if ok is None:
                break
            if ok:
                low = load
                if load >= maximum:
                    high = None
                else:
                    load = min(maximum, load * 2)
                    continue
            else:
                high = load
        if low is not None and high is not None and not closed(low, high):  # bisect
            mid = midpoint(low, high)
            ok = verdict(mid)
            if ok is None:
                break
            low, high = (mid, high) if ok else (low, mid)
            continue
        # the bracket is closed (or the maximum passed): confirm the loads around the edge
        bracket = [x for x in (low, high) if x is not None and x not in confirmed]
        if not bracket or confirm <= 0:
            break
        for x in bracket:
            for _ in range(confirm):
                if not out_of_runs():
                    run(x)
            confirmed.add(x)
        fitted = isotonic_pass_rates(result.tried)
        if high is not None and fitted[high] >= PASS_RATE:  # the fail was noise: go on upward
            low, high = high, None
            if low >= maximum:
                break
            load = min(maximum, low * 2)
            nxt = [x for x, _ in result.tried if x > low]
            if nxt:  # a higher load already ran: bisect towards it instead of doubling
                high = min(nxt)
            continue
        if low is not None and fitted[low] < PASS_RATE:  # the pass was luck: look below it
            below = [x for x, _ in result.tried if x < low and fitted[x] >= PASS_RATE]
            high, low = low, (max(below) if below else None)
            if low is None:
                break
    result.fitted = isotonic_pass_rates(result.tried) if result.tried else {}
    result.edge = edge_of(result.tried)
    if result.edge is not None:
        result.interval = edge_interval(result.tried, confidence)
    return result


def reach_bound(measured: list[tuple[int, float]], reach: int) -> float | None:
    """The most a setting could deliver at any concurrency from its lowest measured one up to
    ``reach``, from ``(concurrency, upper end of its throughput interval)`` measured so far.

    In a closed loop throughput is concurrency x per-stream rate, and a stream gets no faster as
    concurrency rises (the assumption the search already makes of pass rates), so concurrency
    ``c`` measured at most ``u`` bounds every ``c' >= c`` by ``u x c' / c``; each ``c'`` takes the
    tightest of the bounds below it. ``reach`` is the highest concurrency that can count: the
    search's maximum, or the engine's batch limit when it has one (more clients only queue, at
    the batch limit's throughput). None when nothing was measured.
    """
    points = sorted((int(c), u) for c, u in measured if c >= 1)
    if not points:
        return None
    lowest = points[0][0]
    best = max(u for _, u in points)  # what was measured stands whatever the reach
    for target in range(lowest, max(lowest, int(reach)) + 1):
        best = max(best, min(u * target / c for c, u in points if c <= target))
    return best


def grid_size(start: float, maximum: float, integer: bool, precision: float) -> int:
    """How many runs a grid at the search's resolution would take over the same range."""
    if integer:
        return int(maximum) - int(start) + 1
    # geometric grid with steps of (1 + precision): the same relative resolution
    count, load = 1, start
    while load * (1 + precision) <= maximum:
        load *= 1 + precision
        count += 1
    return count
