"""The race within a pair's grid, judged by the load process at its looks (bench.race).

A point that cannot deliver what the pair's leading row already showed cannot be the decision's
answer, however long it is measured: once the point's interval on the ranked figure (good output
tokens per second under the SLO, or output tokens per second without one) lies wholly below the
low end of the leader's, measuring it further only spends the budget. The bench stage hands the
load process the leader's floor (:class:`~quantbench.workloads.plan.RaceFloor`); the dispatcher
asks :func:`cannot_reach` at every look from the workload's ``min_requests`` on.

The figure is the one the point's row will carry (:func:`quantbench.load.metrics.summarize`, the
same window, the same batch-means interval), computed on what has arrived so far: the requests
still in flight count for the tokens they delivered inside the window and are not yet judged.
Each look spends a share of the race's error rate (Bonferroni over the looks the cap allows,
``RaceFloor.confidence``): looking every few requests must not turn noise into a loss.

Before ``min_requests`` a closed loop has a second bound that does not depend on which lengths
its few requests happened to draw (:func:`ceiling`): a stream receives a request's first token
one TTFT after sending it and each next one a TPOT after the last, so it cannot deliver tokens
faster than one per min(TTFT, TPOT), however long or short the answers still to come; the point's
streams together, no faster than ``streams`` times that. Its high end uses the requests' own
spread of min(TTFT, TPOT) (a lower confidence bound of their token-weighted mean, at the look's
level). One stream of an engine that batches sits far below four: on the last default run every
one-stream point's ceiling at 4 requests was under the leader's low end (16.9 against 39.4 on
transformers, 19.4 against 62 on vLLM, 44 against 54 on llama.cpp), where the interval needed 12.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from quantbench import slo as slo_mod
from quantbench.load.metrics import summarize
from quantbench.load.records import RequestRecord
from quantbench.workloads.plan import RaceFloor

RACE_STOP = "cannot reach the leader"
"""How a point's stop reason begins where the race stopped it (the bench stage reads it)."""


def reach(
    race: RaceFloor, recorded: Sequence[RequestRecord], in_flight: Iterable[RequestRecord] = ()
) -> float | None:
    """The high end of the point's interval on ``race.metric`` from what has arrived so far
    (its value where no interval exists yet); None before any measured request completed."""
    if not any(r.phase == "measured" and r.status == "completed" for r in recorded):
        return None
    # in flight: their tokens so far count in the window's throughput, they are not judged yet
    pending = [replace(r, phase="cooldown") for r in in_flight]
    constraints = slo_mod.parse_slo(race.slo) if race.slo.strip() else []
    result = summarize(
        [*recorded, *pending], point="race", scenario="", shape={}, percentiles=(),
        constraints=constraints, confidence=race.confidence,
    )  # fmt: skip
    value = getattr(result, race.metric)
    interval = getattr(result, f"{race.metric}_interval")
    if value is None:
        return None
    return float(interval.high) if interval is not None else float(value)


def ceiling(recorded: Sequence[RequestRecord], streams: int, confidence: float) -> float | None:
    """The most output tokens a second ``streams`` streams could deliver, from the measured
    requests completed so far: ``streams`` over a lower confidence bound (one-sided at
    ``confidence``) of the token-weighted mean of each request's min(TTFT, TPOT); None below two
    such requests or where the bound reaches zero (nothing shown yet)."""
    from scipy import stats

    paces: list[tuple[int, float]] = []
    for r in recorded:
        if r.phase != "measured" or r.status != "completed" or not r.output_tokens:
            continue
        ttft, tpot = r.ttft, r.tpot
        if ttft is None:
            continue
        paces.append((r.output_tokens, ttft if tpot is None else min(ttft, tpot)))
    n = len(paces)
    if n < 2:
        return None
    weight = sum(w for w, _ in paces)
    mean = sum(w * m for w, m in paces) / weight
    # the ratio estimator's standard error (a request's tokens weight its pace)
    spread = sum((w * (m - mean)) ** 2 for w, m in paces) / weight**2 * n / (n - 1)
    low = mean - float(stats.t.ppf(confidence, n - 1)) * math.sqrt(spread)
    return streams / low if low > 0 else None


def cannot_reach(
    race: RaceFloor,
    measured_completed: int,
    recorded: Sequence[RequestRecord],
    in_flight: Iterable[RequestRecord] = (),
    streams: int | None = None,
) -> str | None:
    """The reason to stop the point (it cannot reach the leader beyond noise), or None.

    ``streams``: a closed loop's streams, for the :func:`ceiling` from ``race.first_look`` on
    (None: an open loop, whose streams are not fixed: the interval only, from ``race.after``)."""
    bounds: list[tuple[float, str]] = []
    first = race.first_look
    if streams is not None and first is not None and measured_completed >= first:
        cap = ceiling(recorded, streams, race.one_sided)  # the interval's high end's level
        if cap is not None:
            bounds.append((cap, f"{streams} stream(s) at one token per min(TTFT, TPOT)"))
    if measured_completed >= race.after:
        high = reach(race, recorded, in_flight)
        if high is not None:
            bounds.append((high, "its interval's high end"))
    if not bounds:
        return None
    high, how = min(bounds)
    if not high < race.floor:
        return None
    name = race.metric.replace("_", " ")
    return (
        f"{RACE_STOP} ({race.leader}, {race.floor:.1f} {name}: its interval's low end less "
        f"the decision's margins): at most {high:.1f}, {how} ({race.confidence:.2%} two-sided a look), "
        f"after {measured_completed} measured requests"
    )
