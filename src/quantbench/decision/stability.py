"""How stable the decision is: how often each configuration would win were the measurements
taken again.

Every contender's figures are resampled within their own uncertainty and the whole decision
(:func:`quantbench.decision.rules.decide`: comparisons, equivalence, tie-breaks) is taken again
on each resample; the share of resamples each configuration wins is its stability. The resample
is parametric: each row's ranked figure is drawn on the log scale from a normal around its
estimate with its standard error (what a bootstrap of the row's own slices or repeats does; a
Student t with one degree of freedom, for a row of two repeats, would draw absurd values from its
tails) plus half the drift variance (a second run
of the same configuration drifts from the first: the drift allowance of a comparison is the
variance of a difference, half of it belongs to each row), each variant's quality figure from
its interval, each latency figure likewise; a pair of rows the ``decide`` stage measured in
alternation keeps their paired contrast, drawn from its own pooled estimate. Intervals keep
their width around the drawn value, as a rerun's would. "w8a8 on vLLM wins 94 % of resamples"
is then the answer to "would a second run recommend the same?".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from quantbench.decision.compare import Contrast, LogEstimate
from quantbench.decision.rules import (
    Candidate,
    Confirmed,
    DecisionSettings,
    QualityContrast,
    decide,
)
from quantbench.precision import Figure

RESAMPLES = 1000


def _draw(rng: np.random.Generator) -> float:
    return float(rng.standard_normal())


def _shift(fig: Figure | None, factor: float) -> Figure | None:
    if fig is None:
        return None
    return fig.model_copy(
        update={"value": fig.value * factor, "low": fig.low * factor, "high": fig.high * factor}
    )


def _draw_figure(
    rng: np.random.Generator, fig: Figure | None, extra_var: float = 0.0
) -> tuple[Figure | None, float]:
    """A figure redrawn within its own error (the whole interval moves with it), and the
    factor it moved by."""
    if fig is None:
        return None, 1.0
    est = LogEstimate.of(fig)
    if est is None:
        return fig, 1.0
    step = _draw(rng) * est.se + float(rng.standard_normal()) * math.sqrt(extra_var)
    factor = math.exp(step)
    return _shift(fig, factor), factor


def _redrawn_quality(
    rng: np.random.Generator, quality_contrast: QualityContrast | None
) -> QualityContrast | None:
    """The paired quality comparison, each variant pair's contrast drawn once per resample
    within its own error (and the reverse pair kept its exact negative)."""
    if quality_contrast is None:
        return None
    cache: dict[tuple[str, str], Contrast | None] = {}

    def redrawn(a: Candidate, b: Candidate) -> Contrast | None:
        key = (a.variant, b.variant)
        if key not in cache:
            base = quality_contrast(a, b)
            if base is None:
                cache[key] = cache[key[::-1]] = None
            else:
                step = _draw(rng) * base.se
                drawn = Contrast(base.log_ratio + step, base.se, base.df, base.how)
                cache[key] = drawn
                cache[key[::-1]] = Contrast(-drawn.log_ratio, base.se, base.df, base.how)
        return cache[key]

    return redrawn


def stability(
    rows: Sequence[Candidate],
    settings: DecisionSettings,
    confirmed: Confirmed | None = None,
    quality_contrast: QualityContrast | None = None,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> dict[str, float]:
    """Row key -> the share of resamples in which it wins (only rows that ever win appear)."""
    if not rows:
        return {}
    confirmed = confirmed or {}
    rng = np.random.default_rng(seed)
    wins: Counter[str] = Counter()
    variants = sorted({r.variant for r in rows})
    for _ in range(resamples):
        quality = {}
        for v in variants:
            fig = next((r.quality for r in rows if r.variant == v), None)
            quality[v] = _draw_figure(rng, fig)[0]
        drawn: dict[str, Candidate] = {}
        for r in rows:
            fig, _ = _draw_figure(rng, r.figure, settings.drift**2 / 2)
            lat, _ = _draw_figure(rng, r.latency)
            drawn[r.key] = replace(
                r, figure=fig or r.figure, quality=quality[r.variant], latency=lat
            )
        redrawn: Confirmed = {}
        for (a, b), c in confirmed.items():
            step = _draw(rng) * c.se
            redrawn[(a, b)] = replace(c, log_ratio=c.log_ratio + step)  # its level kept
        got = decide(
            list(drawn.values()), settings, redrawn, _redrawn_quality(rng, quality_contrast)
        )
        if got.winner is not None:
            wins[got.winner.key] += 1
    return {k: n / resamples for k, n in wins.most_common()}
