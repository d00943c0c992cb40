"""What a rerun of the winner will measure (quantbench.decision.expected), checked by
simulating reruns of rows whose truth is known."""

from __future__ import annotations

import math

import numpy as np

from quantbench.decision.expected import rerun_figure
from quantbench.decision.rules import Candidate, DecisionSettings, decide
from quantbench.precision import Figure

from .montecarlo import band

SE = 0.03
SETTINGS = DecisionSettings(drift=0.04)
RUN_SD = math.sqrt(SE**2 + SETTINGS.drift**2 / 2)


def fig(value: float, se: float) -> Figure:
    half = 2.262 * se
    return Figure(value=value, low=value * math.exp(-half), high=value * math.exp(half),
                  confidence=0.95, n=10, method="batch means over 10 slices")  # fmt: skip


def coverage(k: int, trials: int, seed: int, rounds: int = 0) -> tuple[float, float, float]:
    """(the row's own interval, the rerun figure, the winner's overstatement): how often each
    covers a rerun of the winner, K identical rows, each row's standard error itself estimated
    (chi-square, 9 degrees of freedom); ``rounds``: the winner measured again that many times."""
    rng = np.random.default_rng(seed)
    own = new = 0
    over = []
    for _ in range(trials):
        ses = SE * np.sqrt(rng.chisquare(9, k) / 9)
        rows = [
            Candidate(key=f"r{i}", label=f"r{i}", pair=f"r{i}", variant=f"r{i}", engine="e",
                      figure=fig(100 * math.exp(rng.normal(0, RUN_SD)), ses[i]))
            for i in range(k)
        ]  # fmt: skip
        winner = decide(rows, SETTINGS).winner
        assert winner is not None
        remeasured = [fig(100 * math.exp(rng.normal(0, math.sqrt(0.04**2 + 0.02**2))), 0.04)
                      for _ in range(rounds)]  # fmt: skip
        figure = rerun_figure(winner, rows, SETTINGS, remeasured)
        assert figure is not None
        rerun = 100 * math.exp(rng.normal(0, RUN_SD))
        own += winner.figure.low <= rerun <= winner.figure.high
        new += figure.low <= rerun <= figure.high
        over.append(winner.value / 100 - 1)
    return own / trials, new / trials, float(np.mean(over))


def test_the_expected_figure_covers_a_rerun_of_one_configuration() -> None:
    """Item 4, no selection: the row's own interval left out the drift and covered a rerun in
    72 % of 1,000 runs; the rerun figure covers it at its 95 % (94.3 %), within the binomial 99 %
    band."""
    low, high = band(0.95, 1000)
    own, new, _ = coverage(1, 1000, seed=3)
    assert own < low and low <= new <= high, (own, new)


def test_the_winner_of_near_identical_rows_is_expected_with_its_selection() -> None:
    """Item 4: the best of 4 identical rows is overstated (by 4.4 % here) and its own interval
    covered a rerun in 66 % of 1,000 runs; the rerun figure, simultaneous over the rows it was
    chosen from, covers it in at least 95 % (98.5 %: the band's low end is the test), and from 4
    confirming rounds (measurements that did not choose it) likewise (95.8 %)."""
    low, _ = band(0.95, 1000)
    own, new, over = coverage(4, 1000, seed=4)
    assert over > 0.025 and own < low and new >= low, (own, new, over)
    _, from_rounds, _ = coverage(4, 1000, seed=5, rounds=4)
    assert from_rounds >= low, from_rounds
