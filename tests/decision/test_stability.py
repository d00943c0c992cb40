"""How stable the decision is (quantbench.decision.stability), checked by simulating second
runs of rows whose truth is known."""

from __future__ import annotations

import math

import numpy as np

from quantbench.decision.rules import Candidate, DecisionSettings, decide
from quantbench.decision.stability import agreement, stability
from quantbench.precision import Figure

from .montecarlo import band

SE = 0.03  # each row's own standard error (a ±7 % batch-means interval)
SETTINGS = DecisionSettings(drift=0.04)
RUN_SD = math.sqrt(SE**2 + SETTINGS.drift**2 / 2)  # a run: its own error and its spread


def rows_at(logs: np.ndarray) -> list[Candidate]:
    half = 2.262 * SE
    return [
        Candidate(key=f"r{i}", label=f"r{i}", pair=f"r{i}", variant=f"r{i}", engine="e",
                  figure=Figure(value=math.exp(x), low=math.exp(x - half),
                                high=math.exp(x + half), confidence=0.95, n=10,
                                method="batch means over 10 slices"))
        for i, x in enumerate(logs)
    ]  # fmt: skip


def first_runs(truth: np.ndarray, trials: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        yield rows_at(truth + rng.normal(0, RUN_SD, truth.size))


def test_the_share_of_predicted_second_runs_counts_the_noise_twice() -> None:
    """Item 6: the share was drawn around the estimates within one run's error: for two
    identical rows it averaged 75 % (1/2 + atan(1)/pi). Drawn as a second run would differ from
    this one, its mean is the flat-prior predictive 1/2 + atan(1/sqrt 2)/pi = 69.6 %, within the
    99 % band of the mean of 300 runs (69.1 % measured)."""
    truth = np.log(np.array([100.0, 100.0]))
    shares = []
    for i, rows in enumerate(first_runs(truth, 300, seed=1)):
        winner = decide(rows, SETTINGS).winner
        assert winner is not None
        shares.append(stability(rows, SETTINGS, resamples=100, seed=i).get(winner.key, 0.0))
    predictive = 0.5 + math.atan(1 / math.sqrt(2)) / math.pi
    tolerance = 2.576 * float(np.std(shares)) / math.sqrt(300)
    assert abs(float(np.mean(shares)) - predictive) < tolerance, np.mean(shares)


def test_a_second_run_picks_the_winner_at_least_as_often_as_the_bound_says() -> None:
    """Item 6: the share overstated agreement with a second run (identical rows: 69-76 %
    reported, 44-53 % seen). The agreement bound is a lower confidence bound: over simulated
    first runs it lies at or below the true chance that a second run picks the same winner in
    at least 95 % of runs (the binomial 99 % band of 300), for identical rows (truth: 1/2;
    97.7 % measured, the bound 13 % on average) and for a winner 8 % ahead (truth by 4,000
    simulated second runs, 88 % on average; 97.3 %, the bound 36 %)."""
    low, _ = band(0.95, 300)
    for gap in (0.0, math.log(0.92)):
        truth = np.array([math.log(100.0), math.log(100.0) + gap])
        rng = np.random.default_rng(5)
        second = [decide(rows_at(truth + rng.normal(0, RUN_SD, 2)), SETTINGS).winner
                  for _ in range(4000)]  # fmt: skip
        picks = {k: sum(w is not None and w.key == k for w in second) / 4000 for k in ("r0", "r1")}
        if gap == 0.0:
            picks = {"r0": 0.5, "r1": 0.5}
        covered, bounds = 0, []
        for i, rows in enumerate(first_runs(truth, 300, seed=7)):
            winner = decide(rows, SETTINGS).winner
            bound = agreement(rows, SETTINGS, resamples=100, seed=i)
            assert winner is not None and bound is not None
            covered += bound <= picks[winner.key]
            bounds.append(bound)
        assert covered / 300 >= low, (gap, covered / 300)
        if gap == 0.0:
            assert float(np.mean(bounds)) < 0.5  # never above a coin toss, on average
