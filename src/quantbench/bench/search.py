"""SLO-edge search: the highest load that still meets every SLO, found by growing then bisecting.

A full grid runs every load level; the edge search runs a handful: it doubles the load until a
point fails (or the maximum is reached), then bisects between the last pass and the first fail.
Its answer equals the grid's whenever passing is monotone in load (a server that meets its SLOs at
load L meets them at any lower load), which is the usual shape; the runs it took are reported next
to the grid's size so the saving is visible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class EdgeResult:
    """The highest passing load (None if even the first fails) and every load tried, in order."""

    edge: float | None
    tried: list[tuple[float, bool]] = field(default_factory=list)
    grid_size: int = 0

    @property
    def runs(self) -> int:
        return len(self.tried)


def find_edge(
    passes: Callable[[float], bool],
    start: float,
    maximum: float,
    *,
    integer: bool = True,
    precision: float = 0.1,
) -> EdgeResult:
    """Search [start, maximum] for the largest load where `passes(load)` holds.

    integer: loads are whole numbers (concurrency) and the search stops at adjacent integers;
    otherwise (rates) it stops when (high - low) / high <= precision.
    """
    result = EdgeResult(edge=None)
    seen: dict[float, bool] = {}

    def run(load: float) -> bool:
        if load not in seen:
            seen[load] = passes(load)
            result.tried.append((load, seen[load]))
        return seen[load]

    low: float | None = None
    high: float | None = None
    load = start
    while True:  # grow
        if run(load):
            low = load
            if load >= maximum:
                break
            load = min(maximum, load * 2)
        else:
            high = load
            break
    if low is None:
        return result
    while high is not None:  # bisect (low passes, high fails)
        if integer:
            if high - low <= 1:
                break
            mid = float((int(low) + int(high)) // 2)
        else:
            if (high - low) / high <= precision:
                break
            mid = (low + high) / 2
        if run(mid):
            low = mid
        else:
            high = mid
    result.edge = low
    return result


def grid_size(start: float, maximum: float, integer: bool, precision: float) -> int:
    """How many runs a grid at the search's resolution would take over the same range."""
    if integer:
        return int(maximum) - int(start) + 1
    # geometric grid with steps of (1 + precision): the same relative resolution
    count, load = 1, start
    while load * (1 + precision) <= maximum:
        load *= 1 + precision
        count += 1
    return count
