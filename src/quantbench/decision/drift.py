"""The drift measured in the run itself: how much two measurements of one configuration differ
beyond their own intervals, from the decide stage's rounds.

``report.drift`` is a figure measured once, on other machines (docs/BENCH.md); a run on a
noisier machine would be judged with too small an allowance. Every duel of the decide stage
measures each of its two rows once a round, so each row it touches is measured several times,
at different minutes, with its own interval each time: the spread of a row's log figures beyond
those intervals is the run-to-run spread of one measurement (the random-effects moment
estimate, pooled over the rows)

    sigma^2 = max(0, [sum_k sum_i (y_ki - mean_k)^2 - sum_k (n_k - 1)/n_k sum_i se_ki^2]
                     / sum_k (n_k - 1))

and the drift (the spread of the log ratio of two measurements, what ``report.drift`` states) is
``sqrt(2) x sigma``. The decision uses the larger of it and ``report.drift`` (:func:`larger`):
a run may show its machine noisier than stated, never talk the allowance down on a few rounds.
A trend over the stage is part of what it measures, as it is of the rows' drift.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from quantbench.decision.compare import LogEstimate
from quantbench.precision import Figure
from quantbench.schemas.decide import Duel


@dataclass(frozen=True)
class MeasuredDrift:
    """The drift estimated from repeated measurements of the same rows."""

    drift: float
    """sqrt(2) x the run-to-run spread of one measurement (log scale): report.drift's unit."""
    measurements: int
    rows: int
    df: int
    """Degrees of freedom of the spread: measurements less rows."""

    def text(self) -> str:
        return (
            f"{self.drift:.1%} measured over {self.measurements} measurements of {self.rows} "
            f"row{'s' if self.rows != 1 else ''} in the decide stage's rounds"
        )


def measured_drift(measurements: Iterable[tuple[str, Figure]]) -> MeasuredDrift | None:
    """The drift from (row key, figure) measurements (see the module docstring); None without
    a row measured twice."""
    by_row: dict[str, list[LogEstimate]] = defaultdict(list)
    for key, fig in measurements:
        est = LogEstimate.of(fig)
        if est is not None:
            by_row[key].append(est)
    spread = own = 0.0
    df = n = rows = 0
    for ests in by_row.values():
        k = len(ests)
        if k < 2:
            continue
        mean = sum(e.log for e in ests) / k
        spread += sum((e.log - mean) ** 2 for e in ests)
        own += (k - 1) / k * sum(e.se**2 for e in ests)
        df += k - 1
        n += k
        rows += 1
    if df == 0:
        return None
    sigma2 = max(0.0, (spread - own) / df)
    return MeasuredDrift(math.sqrt(2 * sigma2), n, rows, df)


def rounds_drift(duels: Sequence[Duel]) -> MeasuredDrift | None:
    """:func:`measured_drift` over every comparable measurement of the duels' rounds."""
    return measured_drift(
        (m.key, m.figure)
        for d in duels
        for r in d.rounds
        for m in (r.a, r.b)
        if m.figure is not None and m.rankable and not m.error
    )


def larger(configured: float, measured: MeasuredDrift | None) -> tuple[float, str]:
    """The drift a comparison carries, and where it came from: the larger of ``report.drift``
    and the one measured in the run."""
    if measured is None:
        return configured, "report.drift"
    if measured.drift > configured:
        return measured.drift, f"{measured.text()}; report.drift {configured:.1%}"
    return configured, f"report.drift; {measured.text()}"
