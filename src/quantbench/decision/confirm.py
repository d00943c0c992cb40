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
two measurements' own errors and the run-to-run spread of two measurements (the larger of
``report.drift`` and the drift measured in the stage's rounds so far,
:mod:`quantbench.decision.drift`: the alternation cancels a linear drift, not the spread of each
run), and the rounds are pooled by a random-effects estimate whose between-block spread beyond
that is the drift the alternation left (:func:`quantbench.decision.compare.pooled`).
A duel runs at least ``min_rounds`` (two by default: one A B, B A block, which cancels a drift
that is linear over the block; one round alone would take the drift between its two
measurements for a difference), then stops as soon as its pooled comparison is no longer "not
yet separable"; every duel stops at ``max_rounds`` (where two configurations of equal speed
could not be shown equivalent, by the two one-sided tests with 80 % power, within that many
rounds, its first look says how many it would take, from the rounds' own errors:
:func:`rounds_for_equivalence`, what to set ``report.confirm.max_rounds`` to); no round starts once the budget would be
exceeded by one as long as the last round's measuring, no duel starts whose servers' start (as
long as it took at the bench) would not leave the budget a round, and what was then still
unsettled is reported as such: a duel that cannot start gives its turn to the next, so a budget too
short for one vLLM start still settles the duels of quicker servers. The workloads take turns
(the default run's multi-turn duels took the whole budget before chat's duel could start), and
a duel whose servers are already up goes before one that must start its own.

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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from quantbench.decision.compare import EXACT_DF, Contrast, critical, figure_ratio, pooled
from quantbench.decision.drift import larger, rounds_drift
from quantbench.schemas.decide import Duel, Measured, PooledContrast, Round
from quantbench.sequential import nominal_level

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


def round_contrast(a: Measured, b: Measured, spread: float = 0.0) -> Contrast | None:
    """log(a / b) of one round, with the two measurements' own errors and ``spread``: the
    run-to-run spread of two measurements taken back to back (report.drift's unit). The
    alternation cancels a drift linear over a block, not the spread of each run: without it, two
    identical configurations 2.8 % apart a run were called different in a third of the duels."""
    return figure_ratio(a.figure, b.figure, spread)


def look_level(confidence: float, min_rounds: int, max_rounds: int) -> float:
    """The two-sided level a duel's pooled interval is read at after each of its rounds from
    ``min_rounds`` to ``max_rounds``, so that all those looks together err at most ``1 -
    confidence`` (half on each side); ``confidence`` itself where there is one look."""

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


EQUIVALENCE_ROUNDS = 20
"""The most rounds :func:`rounds_for_equivalence` looks at (report.confirm.max_rounds' own)."""
EQUIVALENCE_POWER = 0.8


def rounds_for_equivalence(
    round_var: float, margin: float, confidence: float, min_rounds: int
) -> int | None:
    """The fewest rounds after which two configurations of equal speed are shown equivalent
    within ``margin`` (the two one-sided tests) with :data:`EQUIVALENCE_POWER`, each round's log
    ratio varying by ``round_var`` (its two measurements' own errors and the run-to-run spread)
    and the looks read at the boundary of rounds ``min_rounds`` to that many; None beyond
    :data:`EQUIVALENCE_ROUNDS`."""
    from scipy.stats import norm

    if margin <= 0:
        return None
    need = float(norm.ppf((1 + EQUIVALENCE_POWER) / 2))
    for n in range(max(1, min_rounds), EQUIVALENCE_ROUNDS + 1):
        level = look_level(confidence, min_rounds, n)
        se = math.sqrt(round_var / n)
        if se == 0 or math.log1p(margin) / se - critical(2 * level - 1, EXACT_DF) >= need:
            return n
    return None


@dataclass
class _Duel:
    """A duel as it is measured: its plan, its record, whether it is still open, and what its
    first look said of the rounds equivalence would need."""

    index: int
    plan: Planned
    duel: Duel
    open: bool = True
    sized: str | None = None


def _one_round(
    state: _Duel, measure: Measure, schedule: _Schedule, margin: float, confidence: float,
    min_rounds: int, max_rounds: int, spread: Callable[[], tuple[float, str]],
) -> bool:  # fmt: skip
    """Measure the duel's next round; False once the duel is over (it says why). Every round's
    log ratio carries the run-to-run spread ``spread()`` gives now (the larger of report.drift
    and the one measured in the rounds so far); the pooled interval is read at the level of a
    look of the duel's design, rounds ``min_rounds`` to ``max_rounds``."""
    duel, plan = state.duel, state.plan
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
    drift, source = spread()
    contrasts = [c for r in duel.rounds if (c := round_contrast(r.a, r.b, drift)) is not None]
    both = pooled(contrasts, between=not source)
    if both is None:
        duel.stopped = "no figure to compare"
        return False
    first = min(min_rounds, max_rounds)
    if state.sized is None and index >= first:
        # at the first look, on the rounds' own errors (never on their ratio): whether the
        # duel's rounds can show equivalence at all, and how many it would take
        round_var = sum(c.se**2 for c in contrasts) / len(contrasts)
        need = rounds_for_equivalence(round_var, margin, confidence, min_rounds)
        state.sized = ""
        if margin > 0 and (need is None or need > max_rounds):
            state.sized = (
                f"; equivalence within ±{margin:.0%} would need "
                + (f"{need} rounds" if need else f"more than {EQUIVALENCE_ROUNDS} rounds")
                + f" ({EQUIVALENCE_POWER:.0%} power at a ratio of 1; report.confirm.max_rounds "
                f"is {max_rounds})"
            )
    level = look_level(confidence, min_rounds, max_rounds)
    note = "" if level == confidence else (
        f"; {level * 100:.1f} % a look, {confidence * 100:g} % over rounds {first} to "
        f"{max_rounds}"
    )  # fmt: skip
    if drift > 0:
        note += f"; run-to-run spread {drift:.1%} added to each round ({source})"
    both = replace(both, how=both.how + note + (state.sized or ""))
    duel.contrast = pooled_model(both, level)
    duel.verdict = both.verdict(margin, level)
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
    drift: float | None = None,
    before_duel: Callable[[Planned], None] | None = None,
    start_s: Callable[[Planned], float] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[Duel]:
    """Every planned duel, measured round by round within ``budget_s`` seconds in all: first
    each duel its first ``min_rounds`` (a block that cancels a linear drift), then, while the
    budget lasts, more rounds for those still not separable, up to ``max_rounds``, so no duel
    takes the budget from the next one before that one has a block; where equal configurations
    could not be shown equivalent within ``max_rounds``, the duel says how many rounds it would
    take (:func:`rounds_for_equivalence`).

    The next duel is the one of the workload that has had the fewest turns so far (both
    workloads' claims are tested before either gets a second duel), a contender before a tuned
    setting, the duel whose servers take the least time to start (those already running
    first), then the planned order. ``start_s``: how long starting what a duel needs and is not running
    now would take (its servers' measured starts); a duel whose start leaves no room for a round
    is passed over, and says so. ``drift``: report.drift; each round's log ratio then carries
    the larger of it and the drift measured in the rounds so far (None: no run-to-run spread
    is allowed for, the rounds' own errors alone)."""
    schedule = _Schedule(budget_s, clock)
    states = [
        _Duel(i, p, Duel(workload=p.workload, purpose=p.purpose, a=p.a, b=p.b,  # type: ignore[arg-type]
                         metric=p.metric, screened=p.screened))
        for i, p in enumerate(planned)
    ]  # fmt: skip

    def spread() -> tuple[float, str]:
        if drift is None:
            return 0.0, ""
        return larger(drift, rounds_drift([s.duel for s in states]))

    def starting(plan: Planned) -> float:
        return start_s(plan) if start_s is not None else 0.0

    first = min(min_rounds, max_rounds)
    for phase in ("first block", "more rounds"):
        limit = first if phase == "first block" else max_rounds

        turns: Counter[str] = Counter()
        taken: set[int] = set()
        while True:
            todo = [
                s for s in states if s.index not in taken and s.open and len(s.duel.rounds) < limit
            ]
            if not todo:
                break
            state = min(
                todo,
                key=lambda s: (
                    turns[s.plan.workload], s.plan.purpose != "contender",
                    starting(s.plan), s.index,
                ),
            )  # fmt: skip
            taken.add(state.index)
            turns[state.plan.workload] += 1
            duel, plan = state.duel, state.plan
            if not schedule.fits():
                duel.stopped = schedule.ended()
                continue
            start = starting(plan)
            if not schedule.fits(start):
                duel.stopped = (
                    f"its servers' start (about {start:.0f} s, as measured at the bench) would "
                    f"leave no round within the {schedule.left_s():.0f} s left of the budget of "
                    f"{schedule.budget_s:g} s"
                )
                continue
            if before_duel is not None:
                before_duel(plan)
            while state.open and len(duel.rounds) < limit:
                if not schedule.fits():
                    duel.stopped = schedule.ended()
                    break
                state.open = _one_round(
                    state, measure, schedule, margin, confidence, min_rounds, max_rounds, spread
                )
    for s in states:
        if s.open and len(s.duel.rounds) >= max_rounds:
            s.duel.stopped = f"{max_rounds} rounds, the most allowed (report.confirm.max_rounds)"
    return [s.duel for s in states]


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
