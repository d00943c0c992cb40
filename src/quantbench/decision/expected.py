"""What a rerun of the winner will measure: its ranked figure as a prediction, the drift and the
selection included.

A row's own interval (batch means over its window) covers the configuration's figure in *that*
run; a rerun differs by the run-to-run spread too (the drift), and the row was reported because
it won: the best of K near-identical rows is the luckiest of them (overstated by 2.5-5.9 % for
K = 2-8, its interval covering a rerun 66-83 % of the time with the drift). So the figure a user
is told to expect is a **prediction interval for a rerun** of the winner's point:

    log(rerun) - log(estimate) ~ N(0, v_estimate + se_row^2 + drift^2 / 2)

(a rerun has the row's own error ``se_row`` and one run's spread, half the drift variance), with
the estimate taken

* from the decide stage's **confirming rounds** where the winner has at least two (measurements
  that took no part in making it the leader of the screening): their mean, ``v_estimate`` their
  own errors and spread over their number, read at the confidence; else
* from its row, ``v_estimate = se_row^2 + drift^2 / 2``, read at a **simultaneous** level over the
  K rows it was chosen from (Sidak: ``confidence^(1/K)``): every row's prediction interval then
  holds at once with the confidence, so the winner's does whichever row won. The point value is
  still the winner's own (biased up by the selection); the interval covers a rerun.

tests/decision/test_expected.py measures the coverage of a rerun by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from quantbench.decision.compare import EXACT_DF, LogEstimate, critical, welch_df
from quantbench.decision.rules import Candidate, DecisionSettings
from quantbench.precision import Figure


def rerun_figure(
    winner: Candidate,
    rows: Sequence[Candidate],
    settings: DecisionSettings,
    rounds: Sequence[Figure] = (),
) -> Figure | None:
    """The winner's ranked figure as a rerun of its point will measure it (see the module
    docstring); ``rows``: every row it was chosen from; ``rounds``: its own measurements in the
    decide stage's rounds. None where its figure has no interval to start from."""
    own = LogEstimate.of(winner.figure)
    if own is None:
        return None
    run_var = settings.drift**2 / 2
    ests = [e for f in rounds if (e := LogEstimate.of(f)) is not None]
    rerun = [(own.se**2, own.df), (run_var, float(EXACT_DF))]
    if len(ests) >= 2:
        n = len(ests)
        centre = sum(e.log for e in ests) / n
        spread = sum((e.log - centre) ** 2 for e in ests) / (n - 1)
        # the rounds' mean: their own errors and a run's spread each, or their spread if larger
        modelled = sum(e.se**2 for e in ests) / n + run_var
        parts = [
            (spread / n, float(n - 1))
            if spread > modelled
            else (modelled / n, welch_df([(e.se**2, e.df) for e in ests])),
            *rerun,
        ]
        level = settings.confidence
        how = f"from {n} confirming rounds that did not choose it"
    else:
        centre = own.log
        parts = [(2 * own.se**2, own.df), (2 * run_var, float(EXACT_DF))]  # the row, a rerun
        k = max(1, len(rows))
        level = settings.confidence ** (1 / k)
        how = f"from its row, simultaneous over the {k} rows it was chosen from"
    half = critical(level, welch_df(parts)) * math.sqrt(sum(v for v, _ in parts))
    return Figure(
        value=math.exp(centre),
        low=math.exp(centre - half),
        high=math.exp(centre + half),
        confidence=settings.confidence,
        n=len(ests) if len(ests) >= 2 else winner.figure.n,
        method=f"a rerun's figure: {how}, drift {settings.drift:.1%} included",
    )
