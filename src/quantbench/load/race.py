"""The race within a pair's grid, judged by the load process at its looks (bench.race).

A point that cannot deliver what the pair's leading row already showed cannot be the decision's
answer, however long it is measured: once the point's interval on the ranked figure (good output
tokens per second under the SLO, or output tokens per second without one) lies wholly below the
low end of the leader's, measuring it further only spends the budget. The bench stage hands the
load process the leader's floor (:class:`~quantbench.workloads.plan.RaceFloor`); the dispatcher
asks :func:`cannot_reach` at every look from the workload's ``min_requests`` on.

The figure is the one the point's row will carry (:func:`quantbench.load.metrics.summarize`, the
same window, the same batch-means interval), computed on what has arrived so far: the requests
still in flight count for the tokens they delivered inside the window and are not yet judged.
Each look spends a share of the race's error rate (Bonferroni over the looks the cap allows,
``RaceFloor.confidence``): looking every few requests must not turn noise into a loss.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from quantbench import slo as slo_mod
from quantbench.load.metrics import summarize
from quantbench.load.records import RequestRecord
from quantbench.workloads.plan import RaceFloor

RACE_STOP = "cannot reach the leader"
"""How a point's stop reason begins where the race stopped it (the bench stage reads it)."""


def reach(
    race: RaceFloor, recorded: Sequence[RequestRecord], in_flight: Iterable[RequestRecord] = ()
) -> float | None:
    """The high end of the point's interval on ``race.metric`` from what has arrived so far
    (its value where no interval exists yet); None before any measured request completed."""
    if not any(r.phase == "measured" and r.status == "completed" for r in recorded):
        return None
    # in flight: their tokens so far count in the window's throughput, they are not judged yet
    pending = [replace(r, phase="cooldown") for r in in_flight]
    constraints = slo_mod.parse_slo(race.slo) if race.slo.strip() else []
    result = summarize(
        [*recorded, *pending], point="race", scenario="", shape={}, percentiles=(),
        constraints=constraints, confidence=race.confidence,
    )  # fmt: skip
    value = getattr(result, race.metric)
    interval = getattr(result, f"{race.metric}_interval")
    if value is None:
        return None
    return float(interval.high) if interval is not None else float(value)


def cannot_reach(
    race: RaceFloor,
    measured_completed: int,
    recorded: Sequence[RequestRecord],
    in_flight: Iterable[RequestRecord] = (),
) -> str | None:
    """The reason to stop the point (it cannot reach the leader beyond noise), or None."""
    if measured_completed < race.after:
        return None
    high = reach(race, recorded, in_flight)
    if high is None or not high < race.floor:
        return None
    name = race.metric.replace("_", " ")
    return (
        f"{RACE_STOP} ({race.leader}, {race.floor:.1f} {name} at the low end of its "
        f"interval): at most {high:.1f} ({race.confidence:.2%} two-sided a look), after "
        f"{measured_completed} measured requests"
    )
