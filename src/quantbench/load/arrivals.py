"""Arrival times of an open-loop run.

Gaps between arrivals are gamma-distributed with shape ``burstiness`` and mean ``1 / rate``:
shape 1 is the exponential distribution (a Poisson process), smaller shapes cluster arrivals into
bursts, larger ones space them more evenly. The schedule is computed up front from the seed, so
every worker process of a distributed run can take its share of the same schedule. Locust's
``constant_throughput`` cannot do this: it caps each user's rate, it does not make arrivals.
"""

from __future__ import annotations

import random


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
