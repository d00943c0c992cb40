"""Arrival times of an open-loop run.

Gaps between arrivals are gamma-distributed with shape ``burstiness`` and mean ``1 / rate``:
shape 1 is the exponential distribution (a Poisson process), smaller shapes cluster arrivals into
bursts, larger ones space them more evenly. The schedule is computed up front from the seed, so
every worker process of a distributed run can take its share of the same schedule. Locust's
``constant_throughput`` cannot do this: it caps each user's rate, it does not make arrivals.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator


def arrival_offsets(
    rate: float,
    burstiness: float,
    seed: int,
    *,
    count: int | None = None,
    until_s: float | None = None,
) -> list[float]:
    """Offsets (seconds from the start) of arrivals: the first ``count``, or all before ``until_s``.

    The first request arrives at 0, so a run's first measurement does not wait a random gap.
    """
    if count is None and until_s is None:
        raise ValueError("give count or until_s")
    rng = random.Random(seed)
    scale = 1.0 / (rate * burstiness)
    out: list[float] = []
    t = 0.0
    while (count is None or len(out) < count) and (until_s is None or t < until_s):
        out.append(t)
        t += rng.gammavariate(burstiness, scale)
    return out


def arrival_stream(
    rate: float, burstiness: float, seed: int, *, ramp_s: float = 0.0
) -> Iterator[float]:
    """Endless arrival offsets: gamma gaps of mean ``1 / rate`` (shape ``burstiness``), the rate
    rising linearly from 0 to ``rate`` over the first ``ramp_s`` seconds when a ramp is asked.

    The ramp is a change of clock: arrivals are drawn in "operational time" (a process of rate
    1) and mapped through the inverse of the cumulative rate, so the gaps keep their gamma
    shape at every rate. The first arrival is at 0 without a ramp.
    """
    rng = random.Random(seed)
    scale = 1.0 / burstiness
    u = 0.0
    ramp_area = rate * ramp_s / 2  # operational time the ramp takes
    while True:
        if ramp_s <= 0:
            yield u / rate
        elif u < ramp_area:
            yield math.sqrt(2 * ramp_s * u / rate)
        else:
            yield (u - ramp_area) / rate + ramp_s
        u += rng.gammavariate(burstiness, scale)
