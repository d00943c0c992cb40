"""The race's floor from the decision's margins (quantbench.decision.margins): a point the race
stops is one the decision, given the complete rows, could rank neither first nor equivalent."""

from __future__ import annotations

import itertools
import math

import pytest

from quantbench.decision.compare import critical, figure_ratio
from quantbench.decision.margins import DecisionMargins
from quantbench.precision import Figure

CONFIDENCE = 0.95


def _figure(value: float, log_half: float, n: int) -> Figure:
    """A figure whose interval is ``log_half`` either side of it on the log scale, from ``n``
    batch-means slices (a t interval, as the bench's throughput figures are)."""
    return Figure(
        value=value, low=value * math.exp(-log_half), high=value * math.exp(log_half),
        confidence=CONFIDENCE, n=n, method=f"batch means over {n} slices",
    )  # fmt: skip


def test_the_floor_at_the_defaults() -> None:
    share = DecisionMargins().race_share(CONFIDENCE)
    assert share == pytest.approx(math.exp(-critical(CONFIDENCE, 10**6) * 0.04) / 1.05)
    assert share == pytest.approx(0.881, abs=0.001)
    # no drift and no margin: the leader's low end itself
    assert DecisionMargins(equivalence=1e-9, drift=0.0).race_share(CONFIDENCE) == pytest.approx(1)


@pytest.mark.parametrize(
    ("leader_half", "point_half", "n"),
    list(itertools.product((0.002, 0.02, 0.08), (0.002, 0.02, 0.08, 0.3), (5, 12, 40))),
)
def test_a_point_below_the_floor_is_slower_for_the_decision(
    leader_half: float, point_half: float, n: int
) -> None:
    margins = DecisionMargins()
    leader = _figure(100.0, leader_half, n)
    floor = leader.low * margins.race_share(CONFIDENCE)
    # the point's interval ends just below the floor: the race stops it
    point = _figure(floor * 0.999 * math.exp(-point_half), point_half, n)
    assert point.high < floor
    contrast = figure_ratio(point, leader, margins.drift)
    assert contrast is not None
    assert contrast.verdict(margins.equivalence, CONFIDENCE) == "slower"
    assert contrast.interval(CONFIDENCE)[1] < 1 / (1 + margins.equivalence)


def test_the_leader_s_low_end_alone_stopped_rows_the_decision_keeps() -> None:
    # The race stopped a point once its interval lay below the leader's low end: two tight
    # figures 2 % apart, measured minutes apart, are not separable for the decision (the drift
    # between two measurements is 4 %), yet the race took one out of it
    margins = DecisionMargins()
    leader = _figure(100.0, 0.005, 40)
    point = _figure(leader.low * 0.999 * math.exp(-0.005), 0.005, 40)
    assert point.high < leader.low  # the old floor stopped it
    contrast = figure_ratio(point, leader, margins.drift)
    assert contrast is not None
    assert contrast.verdict(margins.equivalence, CONFIDENCE) == "not yet separable"
    assert point.high > leader.low * margins.race_share(CONFIDENCE)  # the floor does not


def test_the_margins_are_validated_and_give_the_race_its_share() -> None:
    margins = DecisionMargins.model_validate({"equivalence": 0.1, "drift": 0.0})
    assert margins.race_share(CONFIDENCE) == pytest.approx(1 / 1.1)
    with pytest.raises(ValueError):
        DecisionMargins.model_validate({"equivalence": 1.5})
