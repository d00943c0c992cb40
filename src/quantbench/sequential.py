"""Repeated looks at accumulating data: the level each look is tested at (a group-sequential
boundary), so that all of a point's looks together are wrong no more often than its error rate.

The load process looks at a point every few requests (is it beyond its SLO? can it still reach
the pair's leader?) and stops it at the first look that shows so. Testing each look at the
error rate alone would turn noise into a stop: over 20 looks the chance that one of them crosses
is several times the rate. Splitting the rate equally among the looks (Bonferroni) is safe but
treats the looks as if unrelated, when each look's estimate holds every request of the looks
before it: the statistics at n and m requests correlate as sqrt(n / m) (the canonical joint
distribution of Jennison & Turnbull, *Group Sequential Methods*, 2000, ch. 3, which holds
asymptotically for means, ratio estimators and sample quantiles alike). Under it the constant
boundary that spends exactly the error rate over the looks (Pocock's) is computed here:
:func:`constant_boundary` finds c with P(Z_k >= c at some look k) = alpha, by the recursive
numerical integration of Armitage, McPherson and Rowe (1969) that group-sequential software uses
(R's gsDesign, ldbounds): the density of the partial sum that has not crossed yet, carried from
look to look on a grid. For 20 looks at one-sided 2.5 % c is 2.67 where Bonferroni's is 3.02.

A look's statistic is not a normal one: the race's interval is a t interval over batch means,
the fail's bound an order statistic. Each look is tested at the boundary's *nominal* level,
1 - Phi(c) (:func:`nominal_level`), through its own exact or t quantile: the "significance
level approach" that Jennison & Turnbull (ch. 3.8) show keeps the overall error close to its
target. tests/test_sequential.py checks both by simulation: the boundary on Brownian paths, and
the fail rule of quantbench.load.dispatch on skewed latencies.

No maintained Python package computes these boundaries (PyPI has none of gsDesign's or
ldbounds' kind); SciPy's multivariate normal CDF gives the same constant, to its Monte Carlo
precision, in 65 s for 20 looks where this takes a few milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

GRID = 201
"""Points of the integration grid at each look, Simpson's rule (odd): c to 1e-4 against 1,601
points (2.6720 for 20 equal looks at one-sided 2.5 %; 101 points give 2.6721)."""

_TAIL_SD = 8.0
"""How far below zero, in standard deviations of each look's partial sum, its grid reaches."""


def crossing_probability(c: float, information: Sequence[float]) -> float:
    """P(Z_k >= c at some look k) for standardized partial sums Z_k = S_k / sqrt(I_k) of a
    process with independent normal increments, looked at information ``information``
    (increasing; requests measured, or any quantity proportional to them)."""
    info = _checked(information)
    s, w = _grid(math.sqrt(info[0]), c)
    density = _normal_pdf(s, math.sqrt(info[0]))
    for k in range(1, len(info)):
        # the sub-density of S_k that has not crossed yet: the last look's, carried by the
        # increment's normal kernel, cut at this look's boundary
        t, wt = _grid(math.sqrt(info[k]), c)
        step = math.sqrt(info[k] - info[k - 1])
        density = _normal_pdf(t[:, None] - s[None, :], step) @ (density * w)
        s, w = t, wt
    return float(min(1.0, max(0.0, 1.0 - density @ w)))


@lru_cache(maxsize=64)
def _boundary(information: tuple[float, ...], alpha: float) -> float:
    from scipy.optimize import brentq
    from scipy.stats import norm

    one = float(norm.isf(alpha))  # one look: the boundary is the plain quantile
    if len(information) == 1:
        return one
    # Bonferroni's is the most the boundary can be; one look's the least
    high = float(norm.isf(alpha / len(information))) + 0.01
    return float(brentq(lambda c: crossing_probability(c, information) - alpha, one, high,
                        xtol=1e-5))  # fmt: skip


def constant_boundary(information: Sequence[float], alpha: float) -> float:
    """The constant boundary c on the standardized statistic (Pocock's) that all looks at
    ``information`` together cross with probability ``alpha`` (one-sided)."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha}")
    return _boundary(tuple(float(x) for x in _checked(information)), float(alpha))


def nominal_level(information: Sequence[float], alpha: float) -> float:
    """The one-sided error each look is tested at so that all looks at ``information``
    together spend ``alpha``: 1 - Phi(c) of the :func:`constant_boundary` (at least alpha
    / looks, Bonferroni's, and at most alpha)."""
    from scipy.stats import norm

    return float(norm.sf(constant_boundary(information, alpha)))


def look_schedule(first: int, last: int, every: int) -> list[int]:
    """The measured-request counts a point is looked at: every ``every`` requests (the
    multiples of it), from ``first`` to ``last`` inclusive."""
    start = max(every, -(-first // every) * every)
    return list(range(start, last + 1, every))


def _checked(information: Sequence[float]) -> np.ndarray:
    info = np.asarray(information, dtype=float)
    if info.ndim != 1 or info.size == 0 or info[0] <= 0 or np.any(np.diff(info) <= 0):
        raise ValueError(f"information must be positive and increasing, got {list(information)}")
    return info


def _grid(sd: float, c: float) -> tuple[np.ndarray, np.ndarray]:
    """Points of S from _TAIL_SD standard deviations ``sd`` below zero to the boundary c sd,
    and their Simpson weights."""
    s = np.linspace(-_TAIL_SD * sd, c * sd, GRID)
    w = np.ones(GRID)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return s, w * (s[1] - s[0]) / 3


def _normal_pdf(x: np.ndarray, sd: float) -> np.ndarray:
    return np.exp(-0.5 * (x / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
