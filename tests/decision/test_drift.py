"""The drift measured in the run itself (quantbench.decision.drift)."""

from __future__ import annotations

import math

import numpy as np

from quantbench.decision.drift import larger, measured_drift, rounds_drift
from quantbench.precision import Figure
from quantbench.schemas.decide import Duel, Measured, Round


def figure(value: float, se: float) -> Figure:
    half = 2.262 * se
    return Figure(value=value, low=value * math.exp(-half), high=value * math.exp(half),
                  confidence=0.95, n=10, method="batch means over 10 slices")  # fmt: skip


def test_the_drift_of_repeated_measurements_is_measured_beyond_their_own_errors() -> None:
    """Item 3: report.drift was a constant from params. Rows measured 4 times each, 6 % drift
    (4.2 % a run) beyond their own 2 % errors: the estimate of the run variance is unbiased (its
    mean over 2,000 runs within 3 standard errors of the truth), and without a spread beyond the
    errors the estimated drift is small."""
    rng = np.random.default_rng(2)
    truth = 0.06
    estimates = []
    for _ in range(2000):
        got = []
        for row in range(3):
            level = 100.0 * (1 + row)
            for _ in range(4):
                value = level * math.exp(rng.normal(0, truth / math.sqrt(2)) + rng.normal(0, 0.02))
                got.append((f"row{row}", figure(value, 0.02)))
        m = measured_drift(got)
        assert m is not None and m.measurements == 12 and m.rows == 3 and m.df == 9
        estimates.append(m.drift**2 / 2)  # the run variance, whose estimate is unbiased
    mean, se = float(np.mean(estimates)), float(np.std(estimates)) / math.sqrt(2000)
    assert abs(mean - truth**2 / 2) < 3 * se + 1e-5, (mean, truth**2 / 2)
    # a quiet machine: the same rows with no spread beyond their errors
    quiet = [(f"r{i % 3}", figure(100 * math.exp(rng.normal(0, 0.02)), 0.02)) for i in range(12)]
    m = measured_drift(quiet)
    assert m is not None and m.drift < 0.04


def test_the_larger_of_measured_and_configured_is_used_and_named() -> None:
    rounds = [
        Round(index=i, order="ab" if i % 2 else "ba",
              a=Measured(key="a", figure=figure(v, 0.01), rankable=True),
              b=Measured(key="b", figure=figure(100.0, 0.01), rankable=True))
        for i, v in enumerate((90.0, 110.0, 92.0, 108.0), start=1)
    ]  # fmt: skip
    duel = Duel(workload="chat", purpose="contender", a="a", b="b", metric="m", screened="s",
                rounds=rounds)  # fmt: skip
    m = rounds_drift([duel])
    assert m is not None and m.drift > 0.1
    drift, source = larger(0.04, m)
    assert drift == m.drift and "measured over 8 measurements of 2 rows" in source
    assert larger(0.2, m) == (0.2, f"report.drift; {m.text()}")
    assert larger(0.04, None) == (0.04, "report.drift")
