"""Judge every workload under every SLO profile, and pick each one's winner.

A pair runs several workloads, each judged by its own SLO profile (``PairSummary.slos``). For each
workload the profile named ``default`` is that SLO, the one the bench stages judged by: their rows
are kept as written. Each extra profile of ``report.profiles`` is judged for every workload the way
the bench stage judges (:mod:`quantbench.decision.rejudge`).

The winner of a (workload, profile) is the decision of :mod:`quantbench.decision.rules` over
every pair's rows of that workload at once, after the quality gate of ``report.quality`` (a variant
is ranked only when its quality interval lies within the limits): every row compared with the
leader through the interval on their ratio (paired rounds of the ``decide`` stage where it
measured them in alternation), only equivalent rows settled by the tie-breaks (quality, memory,
latency), and the decision's stability from resampling every contender.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from quantbench.decision.compare import Contrast, LogEstimate, figure_ratio
from quantbench.decision.confirm import contrast_of
from quantbench.decision.drift import larger, rounds_drift
from quantbench.decision.expected import rerun_figure
from quantbench.decision.gate import exp_figure, fidelity_figure
from quantbench.decision.gate import quality_gate as gate_quality
from quantbench.decision.rejudge import JudgedFrom, Verdict, judge_row
from quantbench.decision.rows import candidates, decision_settings, rank_metric
from quantbench.decision.rules import (
    Candidate,
    Confirmed,
    Decision,
    DecisionSettings,
    QualityContrast,
    decide,
)
from quantbench.decision.stability import agreement, stability
from quantbench.outputs import ReportInputs, workload_slos
from quantbench.precision import Figure
from quantbench.quality.compare import compare_reports
from quantbench.schemas.bench import BenchRow
from quantbench.schemas.quality import QualityReport
from quantbench.slo import DEFAULT_PROFILE, Constraint, Slo


@dataclass
class JudgedRow:
    """A bench row under one profile, with what the tie rules need."""

    pair: str
    variant: str
    engine: str
    row: BenchRow
    verdicts: list[Verdict]
    judged_from: JudgedFrom
    peak_rss_bytes: int | None = None
    """The server's memory (ServerReport.memory_bytes): GPU plus host, the resident set alone on
    a CPU machine (the name is the CPU's, from before GPUs were measured)."""
    perplexity_ratio: float | None = None
    quality: Figure | None = None
    """e^KL, the variant's mean KL divergence from the merged model as a ratio, with its interval
    (what the quality tie-break compares: decision.gate.fidelity_figure)."""
    served_check: str | None = None
    """The server point's served check verdict (match, mismatch, undecided, not checked)."""
    index: int = 0

    @property
    def workload(self) -> str:
        return self.row.workload

    @property
    def passed(self) -> bool | None:
        return self.row.slo_passed

    @property
    def rankable(self) -> bool:
        return self.row.rankable

    @property
    def label(self) -> str:
        return f"{self.pair} · {self.row.server_point} · {self.row.load_point}"

    @property
    def key(self) -> str:
        """pair/server point/workload/load point: unique across the report."""
        return f"{self.pair}/{self.row.key}"

    def as_bench_dict(self) -> dict[str, Any]:
        """The row as the bench stage's dict (what pick_best reads), tagged with its index."""
        return {
            **self.row.model_dump(mode="python"),
            "pair": self.pair,
            "variant": self.variant,
            "engine": self.engine,
            "_index": self.index,
        }


Pick = tuple[JudgedRow | None, list[JudgedRow], str]


@dataclass(frozen=True)
class DecisionInputs:
    """What a decision needs besides the rows: the user's settings, the decide stage's paired
    rounds (by row key), the paired quality comparison between variants."""

    settings: DecisionSettings = field(default_factory=DecisionSettings)
    confirmed: Confirmed = field(default_factory=dict)
    quality_contrast: QualityContrast | None = None
    resamples: int = 0
    remeasured: dict[str, list[Figure]] = field(default_factory=dict)
    """Row key -> its ranked figure in each of the decide stage's rounds that measured it."""


SLO_UNDECIDED = "SLO undecided"


def slo_undecided_only(row: JudgedRow) -> bool:
    """Whether an undecided SLO verdict is all that keeps the row from the ranking."""
    flags = row.row.flags
    return (
        row.row.measured
        and row.row.slo_verdict == "undecided"
        and bool(flags)
        and all(f.startswith(SLO_UNDECIDED) for f in flags)
    )


def judged_candidates(
    rows: Sequence[JudgedRow], rank_by_goodput: bool, undecided: bool = False
) -> tuple[list[Candidate], dict[str, JudgedRow]]:
    """The rankable judged rows as the decision's candidates (keyed by the row's report-wide
    key, so the decide stage's rounds find their rows), and key -> row; ``undecided``: instead
    the rows kept out of the ranking by an undecided SLO verdict alone."""
    by_index = {r.index: r for r in rows}
    picked = [r for r in rows if slo_undecided_only(r)] if undecided else list(rows)
    found, by_key = candidates(
        [{**r.as_bench_dict(), **({"rankable": True} if undecided else {})} for r in picked],
        rank_metric(rank_by_goodput),
        memory=lambda d: _num(by_index[d["_index"]].peak_rss_bytes),
        quality=lambda d: (
            by_index[d["_index"]].quality or _num(by_index[d["_index"]].perplexity_ratio)
        ),
        key=lambda d: by_index[d["_index"]].key,
        label=lambda d: by_index[d["_index"]].label,
    )
    return found, {k: by_index[d["_index"]] for k, d in by_key.items()}


def decide_judged(
    rows: Sequence[JudgedRow], rank_by_goodput: bool, how: DecisionInputs | None = None
) -> tuple[Decision, dict[str, JudgedRow]]:
    """The decision over judged rows, and the decision's keys -> rows."""
    how = how or DecisionInputs()
    found, rows_by_key = judged_candidates(rows, rank_by_goodput)
    pending, pending_by_key = judged_candidates(rows, rank_by_goodput, undecided=True)
    settings = decision_settings(how.settings, rank_by_goodput)
    decision = decide(found, settings, how.confirmed, how.quality_contrast, pending)
    return decision, {**pending_by_key, **rows_by_key}


def pick(
    rows: Sequence[JudgedRow], rank_by_goodput: bool, how: DecisionInputs | None = None
) -> Pick:
    """The decision over judged rows: (winner, the rows it is tied with or not yet separable
    from, the rule that decided)."""
    decision, rows_by_key = decide_judged(rows, rank_by_goodput, how)
    if decision.winner is None:
        return None, [], decision.rule
    others = [
        rows_by_key[c.key]
        for c in [*([decision.leader] if decision.leader else []), *decision.equivalent,
                  *decision.unresolved]
        if c.key != decision.winner.key
    ]  # fmt: skip
    return rows_by_key[decision.winner.key], others, decision.rule


def _num(value: float | int | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


@dataclass
class Profile:
    """One SLO profile of one workload: every row of the workload judged by it, and the winner."""

    workload: str
    name: str
    slo: Slo
    """What the rows are judged by (its text is what the report and best_config.json show)."""
    rows: list[JudgedRow] = field(default_factory=list)
    best: JudgedRow | None = None
    ties: list[JudgedRow] = field(default_factory=list)
    """The rows the winner is tied with: shown equivalent within the margin (the leader too,
    where a tie-break chose another row)."""
    unresolved: list[JudgedRow] = field(default_factory=list)
    """The rows not yet separable from the winner: contenders, not ties."""
    flagged: list[JudgedRow] = field(default_factory=list)
    """Rows not ranked only for an undecided SLO verdict and not shown slower: contenders if
    their SLO holds."""
    rerun: Figure | None = None
    """The winner's ranked figure as a rerun of its point will measure it: the drift and the
    selection among the rows included (quantbench.decision.expected)."""
    agreement: float | None = None
    """A lower bound, at the confidence, on the chance a second run picks the same winner
    (quantbench.decision.stability.agreement)."""
    decided_by: str = ""
    gated: dict[str, str] = field(default_factory=dict)
    """variant -> why the quality gate keeps it from being ranked."""
    decision: Decision | None = None
    """The whole decision: comparisons with the leader, equivalents, unresolved, trade-offs."""
    stability: dict[str, float] = field(default_factory=dict)
    """Row key -> the share of predicted second runs it wins (quantbench.decision.stability)."""
    how: DecisionInputs | None = None

    @property
    def key(self) -> str:
        """Its key in best_config.json: the workload, or '<workload>:<profile>'."""
        return self.workload if self.is_default else f"{self.workload}:{self.name}"

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_PROFILE

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        return self.slo.constraints

    @property
    def rank_by_goodput(self) -> bool:
        return bool(self.slo.per_request)

    @property
    def ranked_by(self) -> str:
        return rank_metric(self.rank_by_goodput)

    def pair_rows(self, pair: str) -> list[JudgedRow]:
        return [r for r in self.rows if r.pair == pair]

    def pair_pick(self, pair: str) -> Pick:
        """The pair's own winner under this profile (quality gates do not apply within a pair)."""
        return pick(self.pair_rows(pair), self.rank_by_goodput, self.how)

    def pair_best(self, pair: str) -> JudgedRow | None:
        return self.pair_pick(pair)[0]

    def representative(self, pair: str) -> tuple[JudgedRow | None, bool]:
        """The row that stands for a pair: the overall winner when it is the pair's, else the
        pair's own winner, else its nearest miss (and False)."""
        if self.best is not None and self.best.pair == pair:
            return self.best, True
        best = self.pair_best(pair)
        if best is not None:
            return best, True
        measured = [r for r in self.pair_rows(pair) if r.row.measured]
        if not measured:
            rows = self.pair_rows(pair)
            return (rows[0] if rows else None), False
        metric = self.ranked_by

        def closeness(r: JudgedRow) -> tuple[int, int, float]:
            passes = sum(1 for v in r.verdicts if v.passed)
            value = r.row.metric(metric)
            if value is None:
                value = r.row.metric("output_throughput") or 0.0
            return -len(r.row.flags), passes, value

        return max(measured, key=closeness), False


SCREENING_RESAMPLES = 100
"""The stability's resamples when the decide stage plans from the screening."""


class JudgingSettings(Protocol):
    """What judging reads of params.yaml's ``report:`` (:class:`quantbench.report.spec.
    ReportSettings` has it all: the report, above the decision in the layers, renders it)."""

    @property
    def drift(self) -> float: ...

    @property
    def quality(self) -> Mapping[str, float]: ...

    @property
    def stability_resamples(self) -> int: ...

    @property
    def profiles(self) -> Mapping[str, str]: ...

    def decision(self, confidence: float) -> DecisionSettings: ...


def quality_gate(
    report: QualityReport | None,
    settings: JudgingSettings,
    reference: QualityReport | None = None,
) -> str | None:
    """Why a variant may not be ranked (report.quality not shown met), or None."""
    return gate_quality(report, settings.quality, reference)


def judge_workload(
    inputs: ReportInputs,
    workload: str,
    name: str,
    slo: Slo,
    settings: JudgingSettings,
    confidence: float,
    resamples: int | None = None,
) -> Profile:
    """One workload under one profile: every pair's rows judged, the winner picked
    (``resamples``: the stability's, where not ``report.stability_resamples``)."""
    how = decision_inputs(inputs, settings, confidence, workload, name, resamples)
    profile = Profile(workload=workload, name=name, slo=slo)
    index = 0
    for pair_name, summary in sorted(inputs.pairs.items()):
        quality = inputs.quality.get(summary.variant)
        for row in summary.rows:
            if row.workload != workload:
                continue
            as_bench = name == DEFAULT_PROFILE and summary.slos.get(workload, slo) == slo
            judged, verdicts, source = judge_row(
                inputs, summary, row, slo, confidence, as_bench, settings.drift
            )
            server = summary.server(row.server_point)
            profile.rows.append(
                JudgedRow(
                    pair=pair_name,
                    variant=summary.variant,
                    engine=summary.engine,
                    row=judged,
                    verdicts=verdicts,
                    judged_from=source,
                    peak_rss_bytes=server.report.memory_bytes if server else None,  # GPU + host
                    perplexity_ratio=quality.perplexity_ratio if quality else None,
                    quality=fidelity_figure(quality),
                    served_check=(
                        server.served_check.verdict if server and server.served_check else None
                    ),
                    index=index,
                )
            )
            index += 1
    reference = merged_weights_report(inputs)
    for variant in sorted({r.variant for r in profile.rows}):
        reason = quality_gate(inputs.quality.get(variant), settings, reference)
        if reason:
            profile.gated[variant] = reason
    allowed = [r for r in profile.rows if r.variant not in profile.gated]
    profile.how = how
    decision, rows_by_key = decide_judged(allowed, profile.rank_by_goodput, how)
    profile.decision = decision
    profile.decided_by = decision.rule
    profile.flagged = [rows_by_key[c.key] for c in decision.flagged]
    if decision.winner is not None:
        winner = decision.winner
        profile.best = rows_by_key[winner.key]
        # a tie is a row shown equivalent; one not yet separable is a contender (the ranking's
        # "(tie)" read the two alike)
        profile.ties = [
            rows_by_key[c.key]
            for c in [*([decision.leader] if decision.leader else []), *decision.equivalent]
            if c.key != winner.key
        ]
        profile.unresolved = [rows_by_key[c.key] for c in decision.unresolved]
        found, _ = judged_candidates(allowed, profile.rank_by_goodput)
        rule = decision_settings(how.settings, profile.rank_by_goodput)
        profile.rerun = rerun_figure(winner, found, rule, how.remeasured.get(winner.key, []))
        if how.resamples:
            profile.stability = stability(
                found, rule, how.confirmed, how.quality_contrast, how.resamples
            )
            profile.agreement = agreement(
                found, rule, how.confirmed, how.quality_contrast, how.resamples
            )
    return profile


def decision_inputs(
    inputs: ReportInputs,
    settings: JudgingSettings,
    confidence: float,
    workload: str,
    profile: str,
    resamples: int | None = None,
) -> DecisionInputs:
    """The decision's settings (the drift the larger of report.drift and the one the decide
    stage's rounds measured: quantbench.decision.drift), the decide stage's paired rounds of
    this workload and each row's figures in them (they measured the workload's own SLO profile,
    so only its decision uses them) and the paired quality comparison of the variants;
    ``resamples``: the stability's, where not ``report.stability_resamples``."""
    default = profile == DEFAULT_PROFILE
    confirmed = confirmed_contrasts(inputs, workload) if default else {}
    duels = inputs.confirm.duels if inputs.confirm is not None else []
    base = settings.decision(confidence)
    drift, source = larger(base.drift, rounds_drift(duels))
    remeasured: dict[str, list[Figure]] = {}
    for d in duels if default else []:
        if d.workload != workload:
            continue
        for r in d.rounds:
            for m in (r.a, r.b):
                if m.figure is not None and m.rankable and not m.error:
                    remeasured.setdefault(m.key, []).append(m.figure)
    return DecisionInputs(
        settings=replace(base, drift=drift, drift_source=source),
        confirmed=confirmed,
        quality_contrast=quality_contrast(inputs),
        resamples=settings.stability_resamples if resamples is None else resamples,
        remeasured=remeasured,
    )


def confirmed_contrasts(inputs: ReportInputs, workload: str) -> Confirmed:
    """(contender key, leader key) -> their paired rounds' contrast, for ``workload``: only
    a duel that completed its first block of rounds (one round alone takes the drift
    between its two measurements for a difference); a shorter one leaves the screening's
    comparison standing."""
    confirm = inputs.confirm
    if confirm is None:
        return {}
    return {
        (d.a, d.b): contrast
        for d in confirm.for_workload(workload)
        if d.purpose == "contender"
        and (contrast := contrast_of(d)) is not None
        and len(d.rounds) >= confirm.min_rounds
    }


def quality_contrast(inputs: ReportInputs) -> QualityContrast:
    """KL_a - KL_b (nats: the log of e^KL_a / e^KL_b) of two rows' variants, paired over the
    evaluation's token blocks where both reports kept them, else from their own intervals."""
    cache: dict[tuple[str, str], Contrast | None] = {}

    def contrast(a: Candidate, b: Candidate) -> Contrast | None:
        key = (a.variant, b.variant)
        if key not in cache:
            cache[key] = _paired_quality(inputs, *key) or _unpaired(a.quality, b.quality)
        return cache[key]

    return contrast


def _unpaired(a: Figure | None, b: Figure | None) -> Contrast | None:
    return figure_ratio(a, b)


def _paired_quality(inputs: ReportInputs, a: str, b: str) -> Contrast | None:
    qa, qb = inputs.quality.get(a), inputs.quality.get(b)
    if qa is None or qb is None:
        return None
    if a == b:
        return Contrast(0.0, 0.0, 1e6, "the same variant")
    try:
        fig = exp_figure(compare_reports(qa, qb).kl_mean_difference)
    except (ImportError, ValueError):
        return None
    est = LogEstimate.of(fig) if fig is not None else None
    if est is None:
        return None
    return Contrast(est.log, est.se, est.df, "paired over the evaluation's token blocks")


def merged_weights_report(inputs: ReportInputs) -> QualityReport | None:
    """The quality report of the merged weights run by the same harness (the bf16 variant)."""
    return next((q for q in inputs.quality.values() if q.format == "bf16"), None)


def workload_texts(
    inputs: ReportInputs, slo: str, configured: Mapping[str, str] | None = None
) -> dict[str, Slo]:
    """Workload -> its SLO: the configured workloads (params order) then any other one a bench
    stage ran; each judged by the SLO its bench stages used (``configured``, else ``slo``, for a
    workload no stage ran). Text is taken as an :class:`~quantbench.slo.Slo` (one already is
    kept as it is): what the bench stages recorded is text."""
    ran = workload_slos(inputs.pairs, slo)
    out = {w: Slo(ran.get(w, text)) for w, text in (configured or {}).items()}
    for w, text in ran.items():
        out.setdefault(w, Slo(text))
    return out


def stale_slos(inputs: ReportInputs, configured: Mapping[str, str] | None) -> list[str]:
    """A note per workload whose SLO in params differs from the one its bench stages used."""
    ran = workload_slos(inputs.pairs)
    return [
        f"workload {w}: params now says SLO {text!r} but the bench stages judged it by "
        f"{ran[w]!r}; the report uses theirs (rerun the bench stages to judge by the new one)"
        for w, text in (configured or {}).items()
        if w in ran and ran[w].strip() != text.strip()
    ]


def judge_profiles(
    inputs: ReportInputs,
    slo: str,
    settings: JudgingSettings,
    confidence: float = 0.95,
    workloads: Mapping[str, str] | None = None,
    *,
    screening: bool = False,
) -> list[Profile]:
    """Every workload under its own SLO (first), then every workload under each extra profile.

    ``workloads`` are the configured workloads and their SLOs (params order; a workload no
    stage ran still gets its profile, with no winner); ``slo`` is the SLO of a workload nothing
    else names one for (each an :class:`~quantbench.slo.Slo`, or its text). ``screening``: as
    the decide stage plans from it, each workload under its own SLO only, the stability from
    :data:`SCREENING_RESAMPLES` (the plan needs the decision, not its stability)."""
    texts = workload_texts(inputs, slo, workloads)
    resamples = SCREENING_RESAMPLES if screening else None
    defaults = [
        judge_workload(inputs, w, DEFAULT_PROFILE, text, settings, confidence, resamples)
        for w, text in texts.items()
    ]
    if screening:
        return defaults
    profiles = {name: Slo(text) for name, text in settings.profiles.items()}
    extras = [
        judge_workload(inputs, w, name, profile, settings, confidence)
        for w in texts
        for name, profile in profiles.items()
    ]
    return defaults + extras


__all__ = [
    "SCREENING_RESAMPLES",
    "DecisionInputs",
    "JudgedRow",
    "JudgingSettings",
    "Pick",
    "Profile",
    "confirmed_contrasts",
    "decide_judged",
    "decision_inputs",
    "judge_profiles",
    "judge_workload",
    "judged_candidates",
    "merged_weights_report",
    "pick",
    "quality_contrast",
    "quality_gate",
    "slo_undecided_only",
    "stale_slos",
    "workload_texts",
]
