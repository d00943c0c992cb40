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
Looking every few requests must not turn noise into a loss: the race's looks together race a
point that could lead away at most as often as the bench's one-sided error rate allows
(:func:`race_levels`). Its two bounds are two families of looks, each with its share of that
rate: the ceiling's few looks before ``min_requests`` an equal share each (Bonferroni), the
interval's looks from ``min_requests`` to the cap the rest, through the constant
group-sequential boundary over them (quantbench.sequential: with the default schedule, 20 looks
at 12, 16, ..., 88 requests, each at one-sided 0.40 % where Bonferroni's share is 0.11 %).

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

from quantbench.load.metrics import summarize
from quantbench.load.records import RequestRecord
from quantbench.sequential import look_schedule, nominal_level
from quantbench.workloads.plan import RaceFloor

RACE_STOP = "cannot reach the leader"
"""How a point's stop reason begins where the race stopped it (the bench stage reads it)."""

ON_CEILING = "at one token per min(TTFT, TPOT)"
"""What a stop reason says where the streams' ceiling showed it (the bench stage reads it)."""


def race_levels(after: int, cap: int, confidence: float, every: int) -> tuple[int, float, float]:
    """The race's looks for a point measured from ``after`` (``min_requests``) to ``cap``
    requests, looked at every ``every``, at the bench's two-sided ``confidence``: (the first
    look, the interval's two-sided level at each of its looks, the ceiling's one-sided level at
    each of its looks). The race's one-sided error (a point that could lead, stopped) is split
    between the families in proportion to their looks; the interval's share is spent by the
    constant group-sequential boundary over its looks."""
    alpha = (1 - confidence) / 2
    first = min(every, after)
    interval_looks = look_schedule(after, cap, every) or [after]
    ceiling_looks = [n for n in look_schedule(first, cap, every) if n < interval_looks[0]]
    total = len(ceiling_looks) + len(interval_looks)
    share = alpha * len(interval_looks) / total
    return first, 1 - 2 * nominal_level(interval_looks, share), 1 - alpha / total


def reach(
    race: RaceFloor, recorded: Sequence[RequestRecord], in_flight: Iterable[RequestRecord] = ()
) -> float | None:
    """The high end of the point's interval on ``race.metric`` from what has arrived so far
    (its value where no interval exists yet); None before any measured request completed."""
    if not any(r.phase == "measured" and r.status == "completed" for r in recorded):
        return None
    # in flight: their tokens so far count in the window's throughput, they are not judged yet
    pending = [r.model_copy(update={"phase": "cooldown"}) for r in in_flight]
    constraints = list(race.slo.constraints)
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
    first = race.first_look
    if measured_completed >= race.after:
        high = reach(race, recorded, in_flight)
        how = f"its interval's high end (one-sided {1 - (1 - race.confidence) / 2:.2%} a look)"
    elif streams is not None and first is not None and measured_completed >= first:
        # the ceiling bridges the looks before the interval has its sample; from then on the
        # interval alone decides, so each family spends only its own share of the error
        high = ceiling(recorded, streams, race.one_sided)
        how = f"{streams} stream(s) {ON_CEILING} (one-sided {race.one_sided:.2%} a look)"
    else:
        return None
    if high is None or not high < race.floor:
        return None
    name = race.metric.replace("_", " ")
    return (
        f"{RACE_STOP} ({race.leader}, {race.floor:.1f} {name}: its interval's low end less "
        f"the decision's margins): at most {high:.1f}, {how}, "
        f"after {measured_completed} measured requests"
    )
