"""How stable the decision is: how often each configuration would win were the measurements
taken again, and how sure the winner is to be picked by a second run.

**The share of predicted second runs** (:func:`stability`). Every contender's figures are drawn
as a second run of the bench would give them, given this one, and the whole decision
(:func:`quantbench.decision.rules.decide`: comparisons, equivalence, tie-breaks) is taken again on
each draw; the share of draws each configuration wins is its share. The draw is the parametric
predictive one of a flat prior: a second run's log figure differs from this run's by this run's
error and the second run's own, each a run's error (the row's standard error) and its
run-to-run spread (half the drift variance), so by ``2 se^2 + drift^2`` in all; a pair of rows
the ``decide`` stage measured in alternation keeps their paired contrast, drawn within twice its
variance; latency likewise; quality is not drawn (a second run of the bench evaluates nothing
again). Intervals keep their width around the drawn value, as a rerun's would. Drawn around
the estimates within one error only, the share counted the noise once: for two identical rows it
averaged 75 % where a second run agrees half the time. The predictive share reads 70 % there
(1/2 + atan(1/sqrt 2)/pi: a flat prior takes the observed gap at its word), and is right where
rows truly differ by more than their noise: it is *what this run predicts*, not a guarantee.

**The agreement a second run is sure to give** (:func:`agreement`): a lower confidence bound on
the probability that a second run picks the winner again. Every pair of rows gets a
simultaneous interval on its ratio (Bonferroni over the K(K - 1)/2 pairs at the decision's
confidence, so they hold together whichever row the data made the winner); the least
favourable truth those intervals allow puts every other row as far ahead of the winner as its
interval reaches, and the share of second runs drawn from that truth (each row within a run's
error and spread) that pick the winner is the bound: with probability at least the confidence,
a second run picks the winner at least that often (the chance grows with the winner's lead over
each row). For identical rows it is below 1/K; for a winner clear of its rivals it nears 1
(tests/decision/test_stability.py checks both by simulating second runs).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from quantbench.decision.compare import LogEstimate, critical
from quantbench.decision.rules import (
    Candidate,
    Confirmed,
    DecisionSettings,
    QualityContrast,
    compare,
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
    rng: np.random.Generator, fig: Figure | None, extra_var: float = 0.0, runs: int = 1
) -> tuple[Figure | None, float]:
    """A figure redrawn within ``runs`` times its own error variance plus ``extra_var`` (the
    whole interval moves with it), and the factor it moved by."""
    if fig is None:
        return None, 1.0
    est = LogEstimate.of(fig)
    if est is None:
        return fig, 1.0
    step = _draw(rng) * est.se * math.sqrt(runs) + float(rng.standard_normal()) * math.sqrt(
        extra_var
    )
    factor = math.exp(step)
    return _shift(fig, factor), factor


def _at(fig: Figure, log_value: float) -> Figure:
    """The figure moved to ``log_value`` (its interval keeps its relative width)."""
    return _shift(fig, math.exp(log_value) / fig.value) or fig


def stability(
    rows: Sequence[Candidate],
    settings: DecisionSettings,
    confirmed: Confirmed | None = None,
    quality_contrast: QualityContrast | None = None,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> dict[str, float]:
    """Row key -> the share of predicted second runs in which it wins (only rows that ever win
    appear): see the module docstring."""
    if not rows:
        return {}
    confirmed = confirmed or {}
    rng = np.random.default_rng(seed)
    wins: Counter[str] = Counter()
    for _ in range(resamples):
        drawn: dict[str, Candidate] = {}
        for r in rows:
            # this run's error and a second run's: twice a run's variance
            fig, _ = _draw_figure(rng, r.figure, settings.drift**2, runs=2)
            lat, _ = _draw_figure(rng, r.latency, runs=2)
            drawn[r.key] = replace(r, figure=fig or r.figure, latency=lat)
        redrawn: Confirmed = {}
        for (a, b), c in confirmed.items():
            step = _draw(rng) * c.se * math.sqrt(2)
            redrawn[(a, b)] = replace(c, log_ratio=c.log_ratio + step)  # its level kept
        got = decide(list(drawn.values()), settings, redrawn, quality_contrast)
        if got.winner is not None:
            wins[got.winner.key] += 1
    return {k: n / resamples for k, n in wins.most_common()}


def agreement(
    rows: Sequence[Candidate],
    settings: DecisionSettings,
    confirmed: Confirmed | None = None,
    quality_contrast: QualityContrast | None = None,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> float | None:
    """A lower bound, at the decision's confidence, on the probability that a second run picks
    this decision's winner again (see the module docstring); None without a winner."""
    confirmed = confirmed or {}
    winner = decide(rows, settings, confirmed, quality_contrast).winner
    if winner is None:
        return None
    if len(rows) == 1:
        return 1.0
    pairs = len(rows) * (len(rows) - 1) // 2
    level = 1 - (1 - settings.confidence) / pairs
    base = math.log(winner.value)
    truth = {winner.key: base}
    for r in rows:
        if r.key == winner.key:
            continue
        c = compare(r, winner, settings, confirmed).contrast
        if c is None:  # no ratio: the row as far ahead as its own interval reaches
            truth[r.key] = math.log(max(r.figure.high, r.value, 1e-300))
            continue
        truth[r.key] = base + c.log_ratio + critical(level, c.df) * c.se
    rng = np.random.default_rng(seed)
    wins = 0
    for _ in range(resamples):
        drawn = []
        for r in rows:
            est = r.estimate()
            se = est.se if est is not None else 0.0
            step = float(rng.standard_normal()) * math.sqrt(se**2 + settings.drift**2 / 2)
            lat, _ = _draw_figure(rng, r.latency)
            drawn.append(replace(r, figure=_at(r.figure, truth[r.key] + step), latency=lat))
        redrawn: Confirmed = {}
        for (a, b), c in confirmed.items():
            if a in truth and b in truth:
                step = _draw(rng) * c.se
                redrawn[(a, b)] = replace(c, log_ratio=truth[a] - truth[b] + step)
        got = decide(drawn, settings, redrawn, quality_contrast)
        wins += got.winner is not None and got.winner.key == winner.key
    return wins / resamples
