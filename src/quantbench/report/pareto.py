"""Pareto fronts: the points no other point beats on both axes at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Direction = Literal["max", "min"]


def dominates(a: tuple[float, float], b: tuple[float, float], dx: Direction, dy: Direction) -> bool:
    """a is at least as good as b on both axes and strictly better on one."""
    sx = 1.0 if dx == "max" else -1.0
    sy = 1.0 if dy == "max" else -1.0
    ge = sx * a[0] >= sx * b[0] and sy * a[1] >= sy * b[1]
    gt = sx * a[0] > sx * b[0] or sy * a[1] > sy * b[1]
    return ge and gt


def front(points: Sequence[tuple[float, float] | None], dx: Direction, dy: Direction) -> list[int]:
    """Indices of the non-dominated points (None entries are skipped), ordered along x.

    Equal points are all kept: neither beats the other.
    """
    present = [(i, p) for i, p in enumerate(points) if p is not None]
    keep = [i for i, p in present if not any(dominates(q, p, dx, dy) for j, q in present if j != i)]
    return sorted(keep, key=lambda i: (points[i][0], points[i][1]))  # type: ignore[index]
