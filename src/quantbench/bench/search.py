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

The edge's interval is a **smoothed parametric bootstrap**: each run's outcome is drawn again from
its load's pass probability, the fit and the edge taken again, and the interval is the middle of
those edges. Resampling each load's own outcomes instead (AIPerf's way) fails where it matters:
most loads run once, a load run once resamples to itself, and on a gradual pass curve (each
load's pass probability falling smoothly) the interval collapsed to the edge and missed the true
one nearly half the time. The probability is the isotonic fit's, with ``PSEUDO_COUNT`` passes and
as many fails added to each of its level sets, so a load never seen to fail is not taken to pass
for sure. The pseudo-count is small, and goes to a level set (the loads the fit gives one rate),
not to each load, because a clean cliff must stay within one load of its edge: per load it
outweighed the single runs it was added to (Jeffreys' half per load turned a cliff at 6 into
[1, 8]), and Jeffreys' half per level set still widened most cliffs to a tried load two or more
above. Coverage hardly depends on it: simulated on gradual curves (docs/BENCH.md) it covers the
true edge in 82-91 % of searches against 62-81 % before, near the most any interval can that keeps
cliffs tight, since a gradual curve often gives runs that look exactly like a cliff.

The runs it took are reported next to the grid's size, so the saving is visible.

Across server settings the search races (``give_up``): a setting stops as soon as what it measured
shows it cannot reach the leader found so far beyond noise (:func:`reach_bound`, which counts
requests in flight rather than streams, so streams that think between turns are not taken to
fill a batch they leave idle), so runs go where they can still change the answer, as successive
halving would, without restarting any server.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

PASS_RATE = 0.5
"""A load passes when its fitted pass rate is at least this."""
BOOTSTRAP_RESAMPLES = 400
PSEUDO_COUNT = 0.2
"""Passes, and as many fails, added to each level set of the fit before the bootstrap draws from
it. Small enough that every clean cliff over 1..16 and 1..64 stays within one load of its edge
with a margin (no tail beyond it above 1.2 % of resamples, against the 2.5 % each end may hold;
at a quarter, resampling noise already let some through); the module docstring says why not
Jeffreys' half."""


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
    loads, passes, runs = _counts(tried)
    return dict(zip(loads, _fit(passes, runs), strict=True))


def _counts(tried: list[tuple[float, bool]]) -> tuple[list[float], list[int], list[int]]:
    """The tried loads in order, with each one's passes and runs."""
    by_load: dict[float, list[int]] = {}
    for load, ok in tried:
        count = by_load.setdefault(load, [0, 0])
        count[0] += bool(ok)
        count[1] += 1
    loads = sorted(by_load)
    return loads, [by_load[x][0] for x in loads], [by_load[x][1] for x in loads]


def _fit(passes: Sequence[float], runs: Sequence[float]) -> list[float]:
    """Pool adjacent violators: per load (in load order), the isotonic pass rate."""
    blocks: list[list[float]] = []  # [passes, runs, loads in the block]
    for p, n in zip(passes, runs, strict=True):
        blocks.append([float(p), float(n), 1])
        # a block that passes more often than the one below it violates the order: pool them
        while len(blocks) > 1 and blocks[-1][0] / blocks[-1][1] > blocks[-2][0] / blocks[-2][1]:
            top = blocks.pop()
            blocks[-1][0] += top[0]
            blocks[-1][1] += top[1]
            blocks[-1][2] += top[2]
    return [b[0] / b[1] for b in blocks for _ in range(int(b[2]))]


def _edge_index(passes: Sequence[int], fitted: Sequence[float]) -> int | None:
    """The highest load (its index) whose fitted pass rate is >= one half and that passed."""
    ok = [i for i, rate in enumerate(fitted) if rate >= PASS_RATE and passes[i] > 0]
    return max(ok) if ok else None


def edge_of(tried: list[tuple[float, bool]]) -> float | None:
    """The highest load whose fitted pass rate is >= one half and that passed at least once."""
    loads, passes, runs = _counts(tried)
    i = _edge_index(passes, _fit(passes, runs))
    return None if i is None else loads[i]


def smoothed_pass_rates(tried: list[tuple[float, bool]]) -> dict[float, float]:
    """Each load's pass probability for the bootstrap: its level set's pooled rate (the loads the
    isotonic fit gives one rate share their runs) with ``PSEUDO_COUNT`` passes and fails added,
    so no load is certain to pass or fail on the strength of a run or two."""
    loads, passes, runs = _counts(tried)
    fitted = _fit(passes, runs)
    smoothed: list[float] = []
    # the fit is non-increasing in load, so a level set is a run of equal rates
    for _, group in itertools.groupby(range(len(loads)), key=fitted.__getitem__):
        level = list(group)
        pooled = sum(passes[i] for i in level) + PSEUDO_COUNT
        count = sum(runs[i] for i in level) + 2 * PSEUDO_COUNT
        smoothed += [pooled / count] * len(level)
    return dict(zip(loads, smoothed, strict=True))


def edge_interval(
    tried: list[tuple[float, bool]],
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile interval of the edge over a smoothed parametric bootstrap: every run's outcome
    drawn again from its load's :func:`smoothed_pass_rates`, the edge taken again (see the module
    docstring for why not the runs' own outcomes). Seeded: the same runs give the same interval.
    Its ends are loads that were run."""
    loads, _, runs = _counts(tried)
    rates = smoothed_pass_rates(tried)
    chance = [rates[x] for x in loads]
    rng = random.Random(seed)
    edges: list[float] = []
    for _ in range(resamples):
        passes = [
            sum(rng.random() < p for _ in range(n)) for p, n in zip(chance, runs, strict=True)
        ]
        i = _edge_index(passes, _fit(passes, runs))
        edges.append(0.0 if i is None else loads[i])  # 0: none passed
    if all(e == 0.0 for e in edges):
        return None
    edges.sort()
    tail = (1 - confidence) / 2
    low = edges[int(tail * (len(edges) - 1))]
    high = edges[round((1 - tail) * (len(edges) - 1))]
    return (low if low else loads[0], high)


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


def reach_bound(
    measured: Sequence[tuple[int, float, float | None]],
    reach: int,
    max_batch: int | None = None,
) -> float | None:
    """The most a setting could deliver at any concurrency from its lowest measured one up to
    ``reach`` (the highest it could be run at), from ``(concurrency, upper end of its throughput
    interval, mean requests in flight or None)`` measured so far, on an engine that runs at most
    ``max_batch`` requests at once (None: no fixed cap).

    Each concurrency ``c'`` takes the tightest bound of the points measured at or below it
    (:func:`_bound_at`). What was measured stands whatever the bound. None when nothing was
    measured.
    """
    points = sorted((int(c), u, f) for c, u, f in measured if c >= 1)
    if not points:
        return None
    lowest = points[0][0]
    best = max(u for _, u, _ in points)
    for target in range(lowest, max(lowest, int(reach)) + 1):
        bounds = [_bound_at(c, u, f, target, max_batch) for c, u, f in points if c <= target]
        best = max(best, min(bounds))
    return best


def _bound_at(
    streams: int, high: float, in_flight: float | None, target: int, max_batch: int | None
) -> float:
    """What ``target`` streams could deliver at most, from ``streams`` measured at most ``high``
    with ``in_flight`` requests in flight on average. Two bounds, both resting on a request
    getting no faster as load rises (the assumption the search makes of pass rates):

    * per stream: a stream's rate can only fall as streams are added, so ``high x target /
      streams``. It holds with think time too (a stream's requests only wait longer);
    * per request served: throughput is the requests the engine serves at once times the rate of
      each, which does not grow as more are served, and at most ``max_batch`` are. Capping the
      streams at the batch limit instead is wrong where streams think between turns: idle part
      of the time, more of them fill the batch (one slot gave 2.27x at 4 streams what it gave at
      one). At or under the limit nothing queues, so the engine served all ``in_flight``; above
      it, with ``n <= streams`` in flight it serves ``min(n, max_batch) >= n x max_batch /
      streams``, so at least ``in_flight x max_batch / streams`` on average.

    Without think time (``in_flight = streams``) this is the old cap: ``high x min(target,
    max_batch) / streams`` below the limit, the batch limit's throughput above it.
    """
    by_streams = high * target / streams
    if max_batch is None:  # requests in flight <= streams: the per-stream bound is the tighter
        return by_streams
    busy = in_flight if in_flight is not None and in_flight > 0 else float(streams)
    served = busy * min(1.0, max_batch / streams)
    return min(by_streams, high / served * min(target, max_batch))


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
