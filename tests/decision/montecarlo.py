"""Monte-Carlo bands for the simulations of tests/decision: the range an observed rate of
``trials`` runs falls in, with probability ``level``, when the true rate is the nominal one."""

from __future__ import annotations


def band(rate: float, trials: int, level: float = 0.99) -> tuple[float, float]:
    """The central binomial ``level`` band of the share of ``trials`` events of probability
    ``rate`` (as shares)."""
    from scipy.stats import binom

    tail = (1 - level) / 2
    low = float(binom.ppf(tail, trials, rate)) / trials
    high = float(binom.isf(tail, trials, rate)) / trials
    return low, high
