"""What a decision settled and what it leaves open: the status the report's first line, its
first screen and best_config.json's ``status`` all say.

* **decided**: the winner was separated beyond noise from every other rankable row, or shown
  equivalent to them within ``report.equivalence`` and chosen by a tie-break (the decision's
  status ``separable`` or ``tie-break``);
* **provisional**: some rows are still not yet separable from the leader, or kept out of the
  ranking only by an undecided SLO verdict and not shown slower (``not separable``): the winner
  is the best guess the measurements allow, and each open row says what is unsettled (the
  variant, the engine, the server setting or the load) and what more measurement would settle
  it;
* **none**: nothing may be ranked.

A provisional recommendation names what is open in its first line: a script reading
best_config.json's ``status``, or a person reading summary.md's bold line, must not take a
best guess for a decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from quantbench.decision.compare import Contrast, critical
from quantbench.decision.profiles import JudgedRow, Profile
from quantbench.decision.rules import Comparison, Decision
from quantbench.outputs import ReportInputs
from quantbench.schemas.decide import Duel

Status = Literal["decided", "provisional", "none"]
Why = Literal["not yet separable", "SLO undecided"]
# what may differ between the winner and an open row, in the order a reader cares about
DIMENSIONS = ("variant", "engine", "server setting", "load")


def status_of(decision: Decision | None) -> Status:
    """decided / provisional / none, from the decision's own status (the only source)."""
    if decision is None or decision.winner is None:
        return "none"
    return "provisional" if decision.status == "not separable" else "decided"


@dataclass(frozen=True)
class Open:
    """A row the decision could not yet tell from the winner."""

    key: str
    label: str
    why: Why
    differs: tuple[str, ...]
    """What it has other than the winner: variant, engine, server setting, load."""
    comparison: str
    """Against the leader: '0.947x [0.869, 1.032]', or why there is no interval."""
    to_settle: str
    """What more measurement would settle it, in words."""

    def short(self) -> str:
        """'w8a8-vllm · block_size=128 · c4 (0.947x [0.869, 1.032])'."""
        what = self.comparison if self.why == "not yet separable" else "its SLO undecided"
        return f"{self.label} ({what})"


@dataclass(frozen=True)
class Settlement:
    """A decision's status and, when provisional, each row still open."""

    status: Status
    open: list[Open] = field(default_factory=list)

    def unsettled(self) -> str:
        """What is open, in one sentence ('' when decided): 'the server setting is
        unsettled: not yet separable from X (0.947x [0.869, 1.032])'."""
        if self.status != "provisional":
            return ""
        dims = [d for d in DIMENSIONS if any(d in o.differs for o in self.open)]
        verb = "is" if len(dims) == 1 else "are"
        head = f"the {_and(dims)} {verb} unsettled" if dims else "unsettled"
        apart = [o.short() for o in self.open if o.why == "not yet separable"]
        pending = [o.label for o in self.open if o.why == "SLO undecided"]
        parts = []
        if apart:
            parts.append("not yet separable from " + "; ".join(apart))
        if pending:
            parts.append(
                ("and from " if apart else "")
                + "a contender whose SLO verdict is undecided: "
                + "; ".join(pending)
            )
        return head + (": " + ", ".join(parts) if parts else " (the decision names no row)")

    def to_settle(self) -> list[str]:
        """What more measurement would settle each open row ('' entries left out)."""
        return [f"{o.label}: {o.to_settle}" for o in self.open if o.to_settle]


def _and(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _differs(row: JudgedRow, winner: JudgedRow) -> tuple[str, ...]:
    out = []
    if row.variant != winner.variant:
        out.append("variant")
    if row.engine != winner.engine:
        out.append("engine")
    if row.pair != winner.pair:
        return tuple(out)  # another pair's setting and load are another server's altogether
    if row.row.server_point != winner.row.server_point:
        out.append("server setting")
    if row.row.load_point != winner.row.load_point:
        out.append("load")
    return tuple(out)


def _duel(inputs: ReportInputs, workload: str, a: str, b: str) -> Duel | None:
    """The decide stage's contender duel between ``a`` and ``b`` (either side), if it ran."""
    if inputs.confirm is None:
        return None
    for d in inputs.confirm.for_workload(workload):
        if d.purpose == "contender" and {d.a, d.b} == {a, b}:
            return d
    return None


def narrowing(contrast: Contrast, margin: float, confidence: float, rounds: int = 0) -> str:
    """How far the ratio's interval must narrow to settle the comparison at the ratio seen:
    to exclude 1 (then slower or faster), or to fit the equivalence margin (the two one-sided
    tests read the interval at 2 x level - 1), whichever asks less; '' when it cannot say.
    ``rounds``: the paired rounds behind the interval, which then narrows as 1/sqrt(rounds)
    (an interval of rows measured apart holds the drift, which more requests never narrow)."""
    low, high = contrast.interval(confidence)
    if not (low > 0 and math.isfinite(high)):
        return ""
    half = math.log(high / low) / 2
    gap = abs(contrast.log_ratio)
    level = contrast.level if contrast.level is not None else confidence
    # the equivalence interval is the difference interval scaled by the ratio of the critical
    # values; its half-width must fit within log(1 + margin) less the distance from 1
    scale = critical(2 * level - 1, contrast.df) / critical(level, contrast.df)
    room = math.log1p(margin) - gap if margin > 0 else 0.0
    targets = [(gap, "slower" if contrast.log_ratio < 0 else "faster")]
    if room > 0:
        targets.append((room / scale, f"equivalent within ±{margin:.0%}"))
    need, outcome = max(targets)  # the wider target is reached first
    if need <= 0 or need >= half:
        return ""
    text = (
        f"its interval, now ±{math.expm1(half):.1%}, must narrow to ±{math.expm1(need):.1%} to "
        f"show it {outcome}"
    )
    if rounds:
        text += (
            f" (about {math.ceil(rounds * (half / need) ** 2)} rounds in all, at the spread seen)"
        )
    return text


def _separable_settle(
    inputs: ReportInputs, profile: Profile, key: str, leader: str, c: Comparison | None
) -> str:
    """What would settle a row not yet separable from the leader: paired rounds of the two in
    alternation (the decide stage), how many it ran and why it stopped, the knobs."""
    how = profile.how
    margin = how.settings.equivalence if how else 0.05
    confidence = how.settings.confidence if how else 0.95
    confirm = inputs.confirm
    duel = _duel(inputs, profile.workload, key, leader)
    contrast = c.contrast if c is not None else None
    rounds = len(duel.rounds) if duel is not None and c is not None and c.source == "rounds" else 0
    narrow = (
        narrowing(contrast, margin, confidence, rounds)
        if contrast is not None
        else (
            "its ratio has no interval yet (a figure's interval reaches 0): more requests would give one"
        )
    )
    if duel is not None and duel.rounds:
        n = len(duel.rounds)
        what = "more paired rounds with the leader"
        state = f"{n} round{'s' if n != 1 else ''} ran" + (
            f" ({duel.stopped})" if duel.stopped else ""
        )
    elif duel is not None:
        what = "paired rounds in alternation with the leader"
        state = f"its rounds never ran ({duel.stopped or 'no round'})"
    elif confirm is not None and confirm.enabled:
        what = "paired rounds in alternation with the leader"
        state = "the decide stage did not measure it"
    else:
        what = "paired rounds in alternation with the leader"
        state = "the decide stage is off" if confirm is not None else "the decide stage has not run"
    if confirm is not None and confirm.enabled:
        knob = (
            f"raise `report.confirm.budget_s` (now {confirm.budget_s:g} s) or `max_rounds` "
            f"(now {confirm.max_rounds}), then `dvc repro`"
        )
    else:
        knob = "set `report.confirm.enabled: true`, then `dvc repro`"
    return (
        f"{what}" + (f": {narrow}" if narrow else "") + f". {state[:1].upper()}{state[1:]}: {knob}."
    )


def _slo_settle(judged: JudgedRow) -> str:
    """What would settle a contender whose SLO verdict is undecided: more requests at its
    point, for the constraints that could not be decided."""
    undecided = [v for v in judged.verdicts if v.verdict == "undecided"]
    named = "; ".join(v.reason for v in undecided[:2]) or "its SLO verdict"
    workload = judged.workload
    return (
        f"more requests at its load point would decide {named} (`workloads.{workload}."
        "precision.max_requests`, or `bench.repeats`, then `dvc repro`)"
    )


def settlement(inputs: ReportInputs, profile: Profile) -> Settlement:
    """The profile's status and every row its decision leaves open."""
    decision = profile.decision
    status = status_of(decision)
    winner = profile.best
    if status != "provisional" or decision is None or winner is None:
        return Settlement(status)
    rows = {r.key: r for r in profile.rows}
    leader = decision.leader.key if decision.leader else winner.key
    confidence = profile.how.settings.confidence if profile.how else 0.95
    out = []
    for cand in decision.unresolved:
        judged = rows.get(cand.key)
        if judged is None:
            continue
        c = decision.comparisons.get(cand.key)
        contrast = c.contrast if c is not None else None
        text = contrast.text(confidence) if contrast is not None else "no interval on the ratio"
        out.append(
            Open(
                cand.key, judged.label, "not yet separable", _differs(judged, winner), text,
                _separable_settle(inputs, profile, cand.key, leader, c),
            )
        )  # fmt: skip
    for cand in decision.flagged:
        judged = rows.get(cand.key)
        if judged is None:
            continue
        c = decision.comparisons.get(cand.key)
        text = c.contrast.text(confidence) if c is not None and c.contrast is not None else ""
        out.append(
            Open(cand.key, judged.label, "SLO undecided", _differs(judged, winner), text,
                 _slo_settle(judged))
        )  # fmt: skip
    return Settlement(status, out)
