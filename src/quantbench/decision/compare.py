"""Two measured figures compared through an interval on their ratio, never by the overlap of
their two intervals.

Overlap of two 95 % intervals separates only gaps larger than about twice one half-width (an
effective level near 0.5 %): with ±10 % intervals a configuration 16 % slower than another is
called a tie. The right object is the ratio itself. Each figure's interval gives its standard
error on the log scale (throughput is positive and its noise multiplicative), the two errors add
in quadrature (the rows were measured independently), and so does **drift**: two measurements
of the same configuration taken minutes apart differ by more than their own intervals say (the
machine's speed wanders; docs/BENCH.md measured about 4 % from one minute to the next), so a
comparison of rows measured at different times carries ``drift`` as one more error term. Rows
measured in alternation (A B A B, :func:`pooled`) need no such allowance: the drift is in the
rounds' spread and is estimated from it.

A ratio's interval then says one of four things against an equivalence margin ``m`` (the user's
``report.equivalence``): **equivalent** (it lies inside [1/(1+m), 1+m]: whatever the true ratio,
it is within the margin the user called immaterial, even if it is beyond noise), else **faster**
(it lies above 1), **slower** (below 1) or **not yet separable** (neither: more measurement would
tell). Equivalence is the two one-sided tests (TOST): each end of the margin is tested one-sided
at the error the difference test spends on one side, i.e. the interval at ``2 x level - 1`` (90 %
where the difference is read at 95 %) must lie inside the margin. Read at the difference test's
own two-sided interval instead, equivalence asked twice the evidence it needs.

Rows measured apart carry the drift in full, so they can be shown equivalent only when
``z(2 x level - 1) x drift`` is below ``log(1 + m)``: at 95 % and ±5 % a drift under 2.97 %
(:func:`rows_can_be_equivalent`). With the default 4 % even error-free rows give [0.936,
1.068]: equivalence is then a matter for the decide stage's paired rounds, sized for it
(quantbench.decision.confirm).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from quantbench.precision import Figure, t_quantile

Verdict = Literal["faster", "slower", "equivalent", "not yet separable"]
# Degrees of freedom that stand for "known exactly" (a normal quantile).
EXACT_DF = 1_000_000


@functools.lru_cache(maxsize=64)
def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf((1 + confidence) / 2))


def critical(confidence: float, df: float) -> float:
    """Two-sided critical value: Student t with ``df`` degrees of freedom (normal for huge df)."""
    if df >= EXACT_DF or not math.isfinite(df):
        return _z(confidence)
    return t_quantile(confidence, max(1, int(df)))


def figure_df(fig: Figure) -> float:
    """The degrees of freedom behind a figure's interval: t over n repeats or n batch-means
    slices has n - 1; other methods (order statistics, bootstrap, Clopper-Pearson) are read as
    normal."""
    if fig.method.startswith(("t over", "batch means")):
        return max(1.0, float(fig.n - 1))
    return float(EXACT_DF)


@dataclass(frozen=True)
class LogEstimate:
    """A positive figure on the log scale: log(value), its standard error and degrees of freedom."""

    log: float
    se: float
    df: float

    @property
    def value(self) -> float:
        return math.exp(self.log)

    @classmethod
    def of(cls, fig: Figure) -> LogEstimate | None:
        """From a figure with its interval; None when the value or its interval is not positive
        (a log cannot carry it: such a figure is compared by its value only, see :func:`ratio`)."""
        if fig.value <= 0 or fig.low <= 0 or fig.high <= 0:
            return None
        df = figure_df(fig)
        crit = critical(fig.confidence, df)
        # a t or bootstrap interval is symmetric in value, not in log: the wider (lower) side
        # of the log interval is taken, which never understates the error
        half = max(math.log(fig.value / fig.low), math.log(fig.high / fig.value))
        return cls(math.log(fig.value), half / crit, df)

    @classmethod
    def exact(cls, value: float) -> LogEstimate:
        return cls(math.log(value), 0.0, float(EXACT_DF))


@dataclass(frozen=True)
class Contrast:
    """log(a / b) with its standard error and (Welch-Satterthwaite) degrees of freedom."""

    log_ratio: float
    se: float
    df: float
    how: str
    """What the error holds ('independent rows, drift 4 %', 'paired over 3 rounds, ...')."""
    level: float | None = None
    """The two-sided level this contrast's interval is read at whatever confidence is asked:
    a duel's, looked at after each round, is a repeated confidence interval at the nominal
    level of a group-sequential boundary over its looks (quantbench.decision.confirm), so that
    the interval at whichever look stopped it still covers at the stated confidence. None: at
    the confidence asked."""

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def interval(self, confidence: float) -> tuple[float, float]:
        half = critical(self.level if self.level is not None else confidence, self.df) * self.se
        return math.exp(self.log_ratio - half), math.exp(self.log_ratio + half)

    def equivalence_interval(self, confidence: float) -> tuple[float, float]:
        """The interval the two one-sided tests read: at ``2 x level - 1``, each end at the
        one-sided error of the difference test (the level of a duel's look, or ``confidence``)."""
        level = self.level if self.level is not None else confidence
        half = critical(2 * level - 1, self.df) * self.se
        return math.exp(self.log_ratio - half), math.exp(self.log_ratio + half)

    def verdict(self, margin: float, confidence: float) -> Verdict:
        """faster / slower / equivalent / not yet separable (see the module docstring)."""
        low, high = self.interval(confidence)
        eq_low, eq_high = self.equivalence_interval(confidence)
        # within the margin first: a difference the user called immaterial is a tie even when it
        # is beyond noise (it goes to the tie-breaks, where quality or memory may decide)
        if margin > 0 and eq_low >= 1 / (1 + margin) and eq_high <= 1 + margin:
            return "equivalent"
        if low > 1:
            return "faster"
        if high < 1:
            return "slower"
        return "not yet separable"

    def text(self, confidence: float) -> str:
        low, high = self.interval(confidence)
        return f"{self.ratio:.3f}x [{low:.3f}, {high:.3f}]"


def welch_df(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances (variance, df) each."""
    total = sum(v for v, _ in parts)
    if total <= 0:
        return float(EXACT_DF)
    denom = sum(v * v / df for v, df in parts if v > 0 and df < EXACT_DF)
    return float(EXACT_DF) if denom <= 0 else total * total / denom


def ratio(a: LogEstimate, b: LogEstimate, drift: float = 0.0, source: str = "") -> Contrast:
    """a / b from two independently measured figures, with ``drift`` (the spread of the log
    ratio of two measurements of one configuration taken at different times) added; ``source``
    says where the drift came from ('report.drift', 'measured in the decide stage')."""
    parts = [(a.se**2, a.df), (b.se**2, b.df), (drift**2, float(EXACT_DF))]
    se = math.sqrt(sum(v for v, _ in parts))
    how = "independent rows" + (
        f", drift {drift:.1%} added" + (f" ({source})" if source else "") if drift else ""
    )
    return Contrast(a.log - b.log, se, welch_df(parts), how)


def figure_ratio(a: Figure | None, b: Figure | None, drift: float = 0.0) -> Contrast | None:
    """:func:`ratio` of two figures; None where either is missing or not positive."""
    ea = LogEstimate.of(a) if a is not None else None
    eb = LogEstimate.of(b) if b is not None else None
    return ratio(ea, eb, drift) if ea is not None and eb is not None else None


def rows_can_be_equivalent(drift: float, margin: float, confidence: float) -> bool:
    """Whether two rows measured apart could ever be shown equivalent within ``margin``: even
    error-free ones carry the drift, whose equivalence interval must fit inside the margin."""
    return margin > 0 and critical(2 * confidence - 1, EXACT_DF) * drift < math.log1p(margin)


def blocks(rounds: Sequence[Contrast]) -> list[Contrast]:
    """Consecutive rounds paired into blocks (rounds 1-2, 3-4, ...): with the order alternating
    (A B, then B A) a drift linear over a block falls on A and B alike, and the block's mean log
    ratio is free of it; each round alone is not (its second measurement ran later). A last
    round without a partner stands alone."""
    out = []
    for i in range(0, len(rounds), 2):
        part = list(rounds[i : i + 2])
        if len(part) == 1:
            out.append(part[0])
            continue
        a, b = part
        se = math.sqrt(a.se**2 + b.se**2) / 2
        df = welch_df([(a.se**2 / 4, a.df), (b.se**2 / 4, b.df)])
        out.append(Contrast((a.log_ratio + b.log_ratio) / 2, se, df, "block"))
    return out


def pooled(rounds: Sequence[Contrast], between: bool = True) -> Contrast | None:
    """Paired rounds (A and B measured back to back, their order alternating) pooled: rounds are
    paired into blocks (:func:`blocks`), and the blocks pooled by a random-effects meta-analysis
    (DerSimonian-Laird): each block's own error, plus the spread between blocks beyond it (tau^2:
    the drift the alternation could not cancel), estimated from the blocks themselves. With one
    block there is no spread to estimate: its own error stands, and the text says so.

    ``between=False``: the rounds already carry the run-to-run spread (a stated or measured
    drift, :func:`quantbench.decision.confirm.round_contrast`), and the blocks are pooled by
    their errors alone: a tau^2 from two or three blocks, positive in a third of duels by chance
    and then read with k - 1 degrees of freedom, left two equal configurations shown equivalent
    in 68 % of sized duels instead of 82 %; the drift measured over all the stage's rounds
    (quantbench.decision.drift) is what raises the spread where the machine is noisier."""
    rounds = [r for r in rounds if r.se > 0 and math.isfinite(r.log_ratio)]
    if not rounds:
        return None
    parts = blocks(rounds)
    w = [1 / r.se**2 for r in parts]
    mean = sum(wi * r.log_ratio for wi, r in zip(w, parts, strict=True)) / sum(w)
    k = len(parts)
    tau2 = 0.0
    if k >= 2 and between:
        q = sum(wi * (r.log_ratio - mean) ** 2 for wi, r in zip(w, parts, strict=True))
        c = sum(w) - sum(wi * wi for wi in w) / sum(w)
        tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    ws = [1 / (r.se**2 + tau2) for r in parts]
    est = sum(wi * r.log_ratio for wi, r in zip(ws, parts, strict=True)) / sum(ws)
    se = math.sqrt(1 / sum(ws))
    # the blocks' own degrees of freedom, and k - 1 for the spread between them
    df = min(welch_df([(r.se**2, r.df) for r in parts]), float(k - 1) if tau2 > 0 else EXACT_DF)
    n = len(rounds)
    how = f"paired over {n} round{'s' if n != 1 else ''} in alternation" + (
        (f", drift between blocks {math.sqrt(tau2):.1%}" if between else "")
        if k >= 2
        else (", one block (no drift estimate between blocks)" if n >= 2 else ", one round")
    )
    return Contrast(est, se, max(1.0, df), how)
