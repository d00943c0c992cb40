"""Confirming measurements: what the screening could not settle, measured again in alternation.

Two kinds of comparison are measured again (``Duel``):

* a row **not yet separable** from its workload's leader, against the leader: the decision can
  only name it a contender until the two are measured close together in time;
* a swept pair's **tuned setting against its default**, when the screening claims a gain: the
  best of several settings, reported against the default from the same measurements that chose
  it, is biased upward (a winner's curse: with 8 identical settings the best one shows a "gain
  beyond noise" 10 % of the time), so the gain is reported from measurements that took no part
  in choosing it.

Each round measures both rows once, the order alternating (A B, then B A, ...) so that a drift
of the machine over the rounds falls on both alike; each round's paired log ratio carries the
two measurements' own errors, and the rounds are pooled by a random-effects estimate whose
between-round spread is the drift the alternation left (:func:`quantbench.decision.compare.pooled`).
A duel runs at least ``min_rounds`` (two by default: one A B, B A block, which cancels a drift
that is linear over the block; one round alone would take the drift between its two
measurements for a difference), then stops as soon as its pooled comparison is no longer "not
yet separable"; every duel stops at ``max_rounds``; no round starts once the budget would be
exceeded by one as long as the last round's measuring, no duel starts whose servers' start (as
long as it took at the bench) would not leave the budget a round, and what was then still
unsettled is reported as such: a duel that cannot start gives its turn to the next, so a budget too
short for one vLLM start still settles the duels of quicker servers.

A duel is looked at after each round from ``min_rounds`` to ``max_rounds`` and stops at the
first look that settles it, so its looks together must not call two equal configurations
different more often than the stated confidence allows. Each look reads the pooled interval at
the nominal level of a constant group-sequential boundary over the looks (:func:`look_level`:
Pocock's, quantbench.sequential, information in rounds; two-sided 95 % over rounds 2, 3 and 4
is 97.6 % a look): a repeated confidence interval (Jennison & Turnbull, ch. 9), which covers
at 95 % at whichever look the duel stopped, and which the decision reads at that level
(``Contrast.level``). Read at 95 % a look, three looks called two equal configurations
different in 6.7 % of 4,000 simulated duels (tests/decision/test_confirm.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from quantbench.decision.compare import Contrast, figure_ratio, pooled
from quantbench.schemas.decide import Duel, Measured, PooledContrast, Round

Measure = Callable[[str, int, str], Measured]
"""(row key, round index, 'a' or 'b') -> the row measured once more."""


@dataclass(frozen=True)
class Planned:
    workload: str
    purpose: str
    a: str
    b: str
    metric: str
    screened: str


def round_contrast(a: Measured, b: Measured) -> Contrast | None:
    """log(a / b) of one round, with the two measurements' own errors (no drift: they ran back
    to back)."""
    return figure_ratio(a.figure, b.figure)


def look_level(confidence: float, min_rounds: int, max_rounds: int) -> float:
    """The two-sided level a duel's pooled interval is read at after each of its rounds from
    ``min_rounds`` to ``max_rounds``, so that all those looks together err at most ``1 -
    confidence`` (half on each side); ``confidence`` itself where there is one look."""
    from quantbench.sequential import nominal_level

    looks = list(range(max(1, min(min_rounds, max_rounds)), max_rounds + 1))
    if len(looks) == 1:
        return confidence
    return 1 - 2 * nominal_level(looks, (1 - confidence) / 2)


def pooled_model(contrast: Contrast, confidence: float) -> PooledContrast:
    low, high = contrast.interval(confidence)
    return PooledContrast(
        log_ratio=contrast.log_ratio, se=contrast.se, df=contrast.df, how=contrast.how,
        ratio=contrast.ratio, low=low, high=high, confidence=confidence,
    )  # fmt: skip


class _Schedule:
    """The budget, the clock and what a round is expected to take."""

    def __init__(self, budget_s: float, clock: Callable[[], float]) -> None:
        self.budget_s, self.clock = budget_s, clock
        self.start = clock()
        self.round_s: float | None = None  # the last round's measuring: what the next may take

    def fits(self, extra_s: float = 0.0) -> bool:
        """Whether a round (as long as the last one) still fits, after ``extra_s`` seconds of
        something else (starting the duel's servers)."""
        spent = self.clock() - self.start + extra_s
        return spent < self.budget_s and (
            self.round_s is None or spent + self.round_s <= self.budget_s
        )

    def left_s(self) -> float:
        return max(0.0, self.budget_s - (self.clock() - self.start))

    def ended(self) -> str:
        return f"the budget of {self.budget_s:g} s ended (after {self.clock() - self.start:.0f} s)"


def _one_round(
    duel: Duel, plan: Planned, measure: Measure, schedule: _Schedule, margin: float,
    confidence: float, min_rounds: int, note: str = "",
) -> bool:  # fmt: skip
    """Measure the duel's next round; False once the duel is over (it says why). Its pooled
    interval is read at ``confidence``, the level of a look; ``note`` says so in its text."""
    index = len(duel.rounds) + 1
    began = schedule.clock()
    order = "ab" if index % 2 else "ba"
    got: dict[str, Measured] = {}
    for side in order:
        got[side] = measure(plan.a if side == "a" else plan.b, index, side)
    # What the next round may take is this round's measuring, not its servers' starts: a duel
    # keeps both servers up, so its first round's start (vLLM: ~30 s) is not repeated, and
    # counting it stopped the default run's first duel after one round with half its budget left.
    # A measurement that reports no time of its own counts the whole round.
    measured = [m.wall_s for m in got.values()]
    took = schedule.clock() - began
    schedule.round_s = min(took, sum(measured)) if all(w > 0 for w in measured) else took
    duel.rounds.append(Round(index=index, order=order, a=got["a"], b=got["b"]))  # type: ignore[arg-type]
    failed = [m for m in got.values() if m.error or not m.rankable]
    if failed:
        duel.stopped = "a side could not be compared this time: " + "; ".join(
            f"{m.key}: {m.error or ', '.join(m.flags) or 'not rankable'}" for m in failed
        )
        return False
    contrasts = [c for r in duel.rounds if (c := round_contrast(r.a, r.b)) is not None]
    both = pooled(contrasts)
    if both is None:
        duel.stopped = "no figure to compare"
        return False
    both = replace(both, how=both.how + note)
    duel.contrast = pooled_model(both, confidence)
    duel.verdict = both.verdict(margin, confidence)
    if duel.verdict != "not yet separable" and index >= min_rounds:
        duel.stopped = f"{duel.verdict} after {index} round{'s' if index > 1 else ''}"
        return False
    return True


def run_duels(
    planned: list[Planned],
    measure: Measure,
    *,
    budget_s: float,
    max_rounds: int,
    margin: float,
    min_rounds: int = 2,
    confidence: float,
    before_duel: Callable[[Planned], None] | None = None,
    start_s: Callable[[Planned], float] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[Duel]:
    """Every planned duel, measured round by round within ``budget_s`` seconds in all: first
    each duel, in order, its first ``min_rounds`` (a block that cancels a linear drift), then,
    while the budget lasts, more rounds for those still not separable (so no duel takes the
    budget from the next one before that one has a block). ``start_s``: how long starting what a
    duel needs and is not running now would take (its servers' measured starts); a duel whose
    start leaves no room for a round is passed over, and says so."""
    schedule = _Schedule(budget_s, clock)
    level = look_level(confidence, min_rounds, max_rounds)
    note = "" if level == confidence else (
        f"; {level * 100:.1f} % a look, {confidence * 100:g} % over rounds {min_rounds} to "
        f"{max_rounds}"
    )  # fmt: skip
    duels = [
        Duel(
            workload=p.workload,
            purpose=p.purpose,
            a=p.a,
            b=p.b,  # type: ignore[arg-type]
            metric=p.metric,
            screened=p.screened,
        )
        for p in planned
    ]
    open_ = [True] * len(duels)
    for limit in (min(min_rounds, max_rounds), max_rounds):
        for i, (plan, duel) in enumerate(zip(planned, duels, strict=True)):
            if not open_[i] or len(duel.rounds) >= limit:
                continue
            if not schedule.fits():
                duel.stopped = schedule.ended()
                continue
            starting = start_s(plan) if start_s is not None else 0.0
            if not schedule.fits(starting):
                duel.stopped = (
                    f"its servers' start (about {starting:.0f} s, as measured at the bench) would "
                    f"leave no round within the {schedule.left_s():.0f} s left of the budget of "
                    f"{schedule.budget_s:g} s"
                )
                continue
            if before_duel is not None:
                before_duel(plan)
            while open_[i] and len(duel.rounds) < limit:
                if not schedule.fits():
                    duel.stopped = schedule.ended()
                    break
                open_[i] = _one_round(
                    duel, plan, measure, schedule, margin, level, min_rounds, note
                )
    for i, duel in enumerate(duels):
        if open_[i] and len(duel.rounds) >= max_rounds:
            duel.stopped = f"{max_rounds} rounds, the most allowed (report.confirm.max_rounds)"
    return duels


def contrast_of(duel: Duel) -> Contrast | None:
    """The duel's pooled contrast, read at the level its looks were (its ``confidence``)."""
    if duel.contrast is None:
        return None
    c = duel.contrast
    return Contrast(c.log_ratio, c.se, c.df, c.how, level=c.confidence)


def ratio_text(duel: Duel) -> str:
    """'0.93x [0.88, 0.99] (paired over 2 rounds, ...)', or why there is none."""
    c = duel.contrast
    if c is None:
        return f"no paired figure ({duel.stopped or 'not measured'})"
    if not math.isfinite(c.low):
        return f"{c.ratio:.2f}x ({c.how})"
    return f"{c.ratio:.2f}x [{c.low:.2f}, {c.high:.2f}] ({c.how})"
