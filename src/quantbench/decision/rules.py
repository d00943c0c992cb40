"""The decision among the configurations that passed every check: tests on differences first,
then the tie-breaks in a stated order, each deciding only beyond its noise and its materiality.

1. **The leader** is the configuration with the highest ranked figure (good output tokens per
   second under the SLO). Every other one is compared with it through the interval on their
   ratio (:mod:`quantbench.decision.compare`): slower (out), equivalent (within the margin: a
   tie), or not yet separable (more measurement would tell; the ``decide`` stage measures such
   rows again in alternation with the leader, and their paired rounds replace the comparison).
   A configuration the rounds show faster than the leader becomes the leader.
2. **Only equivalent configurations go to the tie-breaks**, in order: quality (the variant's
   fidelity to the merged model, e^KL of its mean KL divergence: decision.gate.fidelity_figure),
   then memory (the server's peak), then latency (E2E
   p50). A rule keeps the rows it cannot show materially worse than the best row on it (their
   difference lies beyond the rule's materiality with its interval, not merely in its point
   value) and passes them to the next rule; a rule that keeps one row decides. Nothing is ever
   settled by input order: rows no rule tells apart go to the highest point value of the
   ranked figure among them, and the decision says so.
3. Whenever a tie-break passes over a faster row, the decision says what was traded, in words:
   "-16 % good output throughput [-25 %, -6 %] for a fidelity (e^KL) 2.0 % lower [0.8 %, 3.2 %]".
4. Rows still not separable from the leader when the measuring ended make the decision
   "not separable": the leader is deployed provisionally and the contenders are named. So do
   rows kept out of the ranking only because their SLO verdict is undecided (an interval
   straddles a limit) and not shown slower than the leader (``flagged``): such a row may meet
   its SLO and be the better deployment; dropping it would call a configuration truly 20 %
   inside its p90 limit "not a contender" in 12-80 % of runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from quantbench.decision.compare import (
    EXACT_DF,
    Contrast,
    LogEstimate,
    Verdict,
    critical,
    figure_ratio,
    ratio,
)
from quantbench.precision import Figure

Status = Literal["separable", "tie-break", "not separable", "none"]
RULES = ("quality", "memory", "latency")


@dataclass(frozen=True)
class Candidate:
    """One configuration (a bench row) as the decision sees it."""

    key: str
    """pair/server point/workload/load point: unique across the report."""
    label: str
    pair: str
    variant: str
    engine: str
    figure: Figure
    """The ranked figure with its interval (value only: low = high = value)."""
    quality: Figure | None = None
    """e^KL: the variant's mean KL divergence from the merged model as a ratio, with its
    interval (decision.gate.fidelity_figure)."""
    memory_bytes: float | None = None
    latency: Figure | None = None
    """E2E p50 in ms, with its interval."""

    @property
    def value(self) -> float:
        return self.figure.value

    def estimate(self) -> LogEstimate | None:
        return LogEstimate.of(self.figure)


@dataclass(frozen=True)
class DecisionSettings:
    """What the user stated (params `report:`): see quantbench.report.spec."""

    equivalence: float = 0.05
    drift: float = 0.04
    confidence: float = 0.95
    materiality: dict[str, float] = field(
        default_factory=lambda: {"quality": 0.01, "memory": 0.10, "latency": 0.10}
    )
    metric_label: str = "good output throughput"
    drift_source: str = ""
    """Where ``drift`` came from ('report.drift', or the larger one measured in the run)."""


@dataclass(frozen=True)
class Comparison:
    """One configuration against the leader."""

    candidate: str
    leader: str
    contrast: Contrast | None
    verdict: Verdict
    source: Literal["rows", "rounds"]
    flag: str = ""
    """Why the row is not ranked though it is compared ('SLO undecided'), or ''."""

    def text(self, confidence: float) -> str:
        tail = f" (not ranked: {self.flag})" if self.flag else ""
        if self.contrast is None:
            return self.verdict + tail
        return f"{self.verdict}: {self.contrast.text(confidence)} ({self.contrast.how}){tail}"


@dataclass(frozen=True)
class Elimination:
    """Why a tie-break passed over a row: the rule, and its difference from the rule's best."""

    rule: str
    against: str
    text: str


@dataclass
class Decision:
    winner: Candidate | None
    leader: Candidate | None
    status: Status
    rule: str
    """What decided, in words."""
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    equivalent: list[Candidate] = field(default_factory=list)
    unresolved: list[Candidate] = field(default_factory=list)
    eliminated: dict[str, Elimination] = field(default_factory=dict)
    tradeoffs: list[str] = field(default_factory=list)
    flagged: list[Candidate] = field(default_factory=list)
    """Rows not ranked only for an undecided SLO verdict, not shown slower than the leader."""

    @property
    def contenders(self) -> list[str]:
        """The keys still in play: the winner, whatever it could not be separated from, and the
        rows whose undecided SLO keeps them from the ranking but not from the lead."""
        keys = [self.winner.key] if self.winner else []
        return keys + sorted(c.key for c in [*self.unresolved, *self.flagged])


Confirmed = dict[tuple[str, str], Contrast]
"""(candidate key, leader key) -> their paired rounds' contrast (candidate / leader)."""
QualityContrast = Callable[[Candidate, Candidate], Contrast | None]


def _pct(x: float) -> str:
    return f"{x:+.1%}".replace("+-", "-")


def compare(
    cand: Candidate, leader: Candidate, settings: DecisionSettings, confirmed: Confirmed
) -> Comparison:
    """The candidate against the leader: from their paired rounds where the decide stage
    measured them in alternation, else from their rows with drift added."""
    for (a, b), contrast in confirmed.items():
        if (a, b) == (cand.key, leader.key):
            return Comparison(
                cand.key, leader.key, contrast,
                contrast.verdict(settings.equivalence, settings.confidence), "rounds",
            )  # fmt: skip
        if (a, b) == (leader.key, cand.key):
            flipped = replace(contrast, log_ratio=-contrast.log_ratio)
            return Comparison(
                cand.key, leader.key, flipped,
                flipped.verdict(settings.equivalence, settings.confidence), "rounds",
            )  # fmt: skip
    a, b = cand.estimate(), leader.estimate()
    if a is None or b is None:
        # a figure whose interval reaches 0 cannot be put on a log scale: without a ratio's
        # interval a lower value is no verdict, and only intervals apart (the drift allowed
        # for) show it slower
        return Comparison(cand.key, leader.key, None, _apart(cand, leader, settings), "rows")
    contrast = ratio(a, b, settings.drift, settings.drift_source)
    return Comparison(
        cand.key, leader.key, contrast,
        contrast.verdict(settings.equivalence, settings.confidence), "rows",
    )  # fmt: skip


def _apart(cand: Candidate, leader: Candidate, settings: DecisionSettings) -> Verdict:
    """Slower only when the candidate's interval lies wholly below the leader's, the drift
    allowed for (a conservative test: intervals apart, each at the confidence); else not yet
    separable."""
    allowance = math.exp(critical(settings.confidence, EXACT_DF) * settings.drift)
    if cand.figure.high * allowance < leader.figure.low:
        return "slower"
    return "not yet separable"


def _leader(
    rows: Sequence[Candidate], settings: DecisionSettings, confirmed: Confirmed
) -> Candidate:
    """The highest point value, unless paired rounds showed another one faster than it."""
    leader = max(rows, key=lambda r: (r.value, r.key))
    seen = {leader.key}
    while True:
        faster = [
            r
            for r in rows
            if r.key not in seen
            and compare(r, leader, settings, confirmed).source == "rounds"
            and compare(r, leader, settings, confirmed).verdict == "faster"
        ]
        if not faster:
            return leader
        leader = max(faster, key=lambda r: (r.value, r.key))
        seen.add(leader.key)


def _unpaired_quality(a: Candidate, b: Candidate) -> Contrast | None:
    """log(quality_a / quality_b) from the two variants' own intervals (as if independent:
    wider than the paired comparison, which the caller supplies where the data allow)."""
    return figure_ratio(a.quality, b.quality)


def _latency_contrast(a: Candidate, b: Candidate) -> Contrast | None:
    return figure_ratio(a.latency, b.latency)


def _memory_contrast(a: Candidate, b: Candidate) -> Contrast | None:
    """Peak memory is one reading per server, without sampling error of its own."""
    if not a.memory_bytes or not b.memory_bytes:
        return None
    return Contrast(math.log(a.memory_bytes / b.memory_bytes), 0.0, 1e6, "peak readings")


RULE_WORDS = {
    "quality": "fidelity (e^KL from the merged model)",
    "memory": "peak memory",
    "latency": "E2E p50",
}


def _rule_value(rule: str, c: Candidate) -> float | None:
    if rule == "quality":
        return c.quality.value if c.quality is not None else None
    if rule == "memory":
        return c.memory_bytes
    return c.latency.value if c.latency is not None else None


def _apply_rule(
    rule: str,
    group: list[Candidate],
    contrast: Callable[[Candidate, Candidate], Contrast | None],
    settings: DecisionSettings,
    out: dict[str, Elimination],
) -> list[Candidate]:
    """The rows of ``group`` this rule cannot show materially worse than its best row."""
    known = [c for c in group if _rule_value(rule, c) is not None]
    if len(known) < 2:
        return group
    best = min(known, key=lambda c: (_rule_value(rule, c), c.key))
    bar = math.log1p(settings.materiality.get(rule, 0.0))
    keep = []
    for c in group:
        if c is best:
            keep.append(c)
            continue
        diff = contrast(c, best) if _rule_value(rule, c) is not None else None
        if diff is None:
            keep.append(c)  # this rule cannot speak about this row
            continue
        low, high = diff.interval(settings.confidence)
        if math.log(low) > bar:
            span = f"[{_pct(low - 1)}, {_pct(high - 1)}]" if high > low else "(one reading)"
            out[c.key] = Elimination(
                rule,
                best.key,
                f"its {RULE_WORDS[rule]} {_pct(diff.ratio - 1)} {span} above {best.label}'s "
                f"({rule} decided, beyond its materiality of "
                f"{settings.materiality.get(rule, 0.0):.0%})",
            )
        else:
            keep.append(c)
    return keep


def _tradeoff(
    winner: Candidate,
    passed: Candidate,
    elim: Elimination,
    settings: DecisionSettings,
    confirmed: Confirmed,
) -> str:
    """What the winner gave up of a faster row, from the comparison that made them a tie: the
    paired rounds where the decide stage measured them in alternation (quoting the rows' ratio
    there told of a -8.1 % [-17.0, +1.7] loss the rounds had shown to be 0.992x [0.978, 1.006]),
    else their rows with the drift added."""
    c = compare(winner, passed, settings, confirmed).contrast
    if c is not None:
        low, high = c.interval(settings.confidence)
        speed = f"{_pct(c.ratio - 1)} {settings.metric_label} [{_pct(low - 1)}, {_pct(high - 1)}]"
        if "paired" in c.how:
            speed += " (paired rounds)"
    else:
        speed = f"{_pct(winner.value / passed.value - 1)} {settings.metric_label}"
    return f"{winner.label} over {passed.label}: {speed}, for {elim.text}"


def _flagged(
    undecided: Sequence[Candidate],
    leader: Candidate,
    settings: DecisionSettings,
    confirmed: Confirmed,
    comparisons: dict[str, Comparison],
) -> list[Candidate]:
    """The rows of ``undecided`` (SLO verdict undecided, nothing else against them) not shown
    slower than the leader; each one's comparison goes into ``comparisons``, flagged."""
    out = []
    for r in undecided:
        c = replace(compare(r, leader, settings, confirmed), flag="its SLO verdict is undecided")
        comparisons[r.key] = c
        if c.verdict != "slower":
            out.append(r)
    return out


def decide(
    rows: Sequence[Candidate],
    settings: DecisionSettings,
    confirmed: Confirmed | None = None,
    quality_contrast: QualityContrast | None = None,
    undecided: Sequence[Candidate] = (),
) -> Decision:
    """The decision among ``rows`` (each already rankable: SLO met, checks passed, quality
    gate passed); see the module docstring. ``undecided``: rows kept from the ranking only by
    an undecided SLO verdict; those not shown slower than the leader are carried as flagged
    contenders, and the decision is then "not separable"."""
    confirmed = confirmed or {}
    if not rows:
        # the rows whose SLO is undecided may still meet it: named, not ranked
        return Decision(
            None, None, "none", "no row met its SLO and every check", flagged=list(undecided)
        )
    decision = _decide(rows, settings, confirmed, quality_contrast)
    assert decision.leader is not None
    decision.flagged = _flagged(
        undecided, decision.leader, settings, confirmed, decision.comparisons
    )
    if decision.flagged:
        decision.status = "not separable"
        decision.rule += (
            f"; {len(decision.flagged)} row(s) not ranked for an undecided SLO verdict are not "
            "shown slower"
        )
    return decision


def _decide(
    rows: Sequence[Candidate],
    settings: DecisionSettings,
    confirmed: Confirmed,
    quality_contrast: QualityContrast | None,
) -> Decision:
    leader = _leader(rows, settings, confirmed)
    comparisons = {
        r.key: compare(r, leader, settings, confirmed) for r in rows if r.key != leader.key
    }
    equivalent = [
        r for r in rows if r.key in comparisons and comparisons[r.key].verdict == "equivalent"
    ]
    unresolved = [
        r
        for r in rows
        if r.key in comparisons and comparisons[r.key].verdict == "not yet separable"
    ]
    decision = Decision(
        leader, leader, "separable", "", comparisons, equivalent, unresolved, {}, []
    )
    what = settings.metric_label
    if not equivalent:
        decision.rule = (
            f"the highest {what}, separable beyond noise from every other row"
            if not unresolved
            else f"the highest {what}; not yet separable from {len(unresolved)} row(s)"
        )
        decision.status = "separable" if not unresolved else "not separable"
        return decision
    qc = quality_contrast or _unpaired_quality
    contrasts = {"quality": qc, "memory": _memory_contrast, "latency": _latency_contrast}
    group = [leader, *equivalent]
    decided_by = ""
    for rule in RULES:
        before = len(group)
        group = _apply_rule(rule, group, contrasts[rule], settings, decision.eliminated)
        if len(group) == 1:
            decided_by = rule
            break
        if len(group) < before and not decided_by:
            decided_by = rule  # narrowed, not yet decided
    winner = max(group, key=lambda r: (r.value, r.key))
    decision.winner = winner
    decision.status = "tie-break" if not unresolved else "not separable"
    n = len(equivalent) + 1
    if len(group) == 1:
        decision.rule = f"{n} rows equivalent within ±{settings.equivalence:.0%} on {what}: settled by {decided_by}"
    else:
        decision.rule = (
            f"{n} rows equivalent within ±{settings.equivalence:.0%} on {what}; no tie-break told "
            f"{len(group)} of them apart beyond noise and materiality: the highest {what} among them"
        )
    for r in sorted(rows, key=lambda r: -r.value):
        if r.value > winner.value and r.key in decision.eliminated:
            decision.tradeoffs.append(
                _tradeoff(winner, r, decision.eliminated[r.key], settings, confirmed)
            )
    if unresolved:
        decision.rule += f"; not yet separable from {len(unresolved)} row(s)"
    return decision
