"""The decision's two margins (``report.equivalence``, ``report.drift``) and the floor they give a
race.

A race (``bench.race``) stops a point once it cannot reach the leader. "Cannot reach" must mean
what the decision (:mod:`quantbench.decision.rules`) would conclude from the complete rows, or
the race removes a configuration the decision would have kept: a row whose ratio to the leader is
shown within ``[1/(1+m), 1+m]`` is *equivalent* and goes to the tie-breaks (where a smaller
server, or a better variant, wins), and every comparison of rows measured at different times
carries the drift as one more error term (:func:`quantbench.decision.compare.ratio`). So a point
stops only once the high end of its own interval is below

    floor = (the leader's low end) x exp(-z x drift) / (1 + m)

with ``z`` the two-sided critical value at the bench's confidence. Then the point's ratio to the
leader is below ``1/(1+m)`` beyond noise with the drift allowed for: the sum of the two
one-sided margins and ``z x drift`` is at least the decision's ``z x sqrt(se_a² + se_b² +
drift²)``, so the decision, given the complete rows, could call it neither equivalent nor faster.
At the defaults (95 %, drift 4 %, ±5 %) the floor is 0.881 of the leader's low end.
"""

from __future__ import annotations

import math

from pydantic import Field

from quantbench.decision.compare import EXACT_DF, critical
from quantbench.settings import Settings


class DecisionMargins(Settings):
    """How close two configurations may be and still be told apart: params.yaml ``report:``."""

    equivalence: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Equivalence margin: two configurations whose ranked figures are shown within "
        "this ratio of each other (the ratio's interval inside [1/(1+m), 1+m]) are equivalent, "
        "and only equivalent ones go to the tie-breaks. 0.05: within ±5 %.",
    )
    drift: float = Field(
        0.04,
        ge=0,
        lt=1,
        description="How much two measurements of one configuration taken at different times "
        "differ beyond their own intervals (the spread of their log ratio): added to every "
        "comparison of rows not measured in alternation. 0.04: measured on 2-core machines, "
        "docs/BENCH.md.",
    )

    def race_share(self, confidence: float) -> float:
        """The share of the leader's low end below which a point's high end shows it cannot be
        ranked first (the module's docstring)."""
        return math.exp(-critical(confidence, EXACT_DF) * self.drift) / (1 + self.equivalence)
