"""Judge every measured point against each SLO profile and pick a winner per profile.

The profile named ``default`` is ``slo:`` from params, the one the bench stages judged by: their
verdicts are kept as written. Other profiles (``report.profiles``) are judged the way the bench
stage would have judged them: the load harness's own :func:`quantbench.load.metrics.summarize`
runs over each repeat's raw records with the profile's constraints (that is what goodput needs),
and :func:`quantbench.bench.results.fold_repeats` folds the repeats (a point passes only if every
repeat does). Where a point's records are missing, its aggregate figures (p50/p99, throughput,
error rate) are checked instead and a constraint they cannot answer fails with "no value".

The winner is :func:`quantbench.bench.results.pick_best` applied to every pair's rows at once,
after the optional quality gates of ``report:``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from quantbench import slo as slo_mod
from quantbench.bench.results import fold_repeats, pick_best
from quantbench.load.metrics import PointResult, summarize
from quantbench.load.spec import DEFAULT_PERCENTILES
from quantbench.report.inputs import PointKey, ReportInputs
from quantbench.report.spec import DEFAULT_PROFILE, ReportSettings
from quantbench.schemas.bench import BenchRow, Interval, PairSummary
from quantbench.schemas.quality import QualityReport

JudgedFrom = Literal["bench", "records", "aggregates", "not measured"]


@dataclass(frozen=True)
class Verdict:
    """One constraint of a profile at one point."""

    text: str
    metric: str
    statistic: str | None
    op: str
    threshold: float
    value: float | None
    passed: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "constraint": self.text,
            "metric": self.metric,
            "statistic": self.statistic,
            "op": self.op,
            "threshold": self.threshold,
            "value": self.value,
            "passed": self.passed,
            "reason": self.reason,
        }


@dataclass
class JudgedRow:
    """A bench row with the SLO fields of one profile."""

    pair: str
    variant: str
    engine: str
    row: BenchRow
    verdicts: list[Verdict]
    judged_from: JudgedFrom
    index: int = 0

    @property
    def passed(self) -> bool | None:
        return self.row.slo_passed

    @property
    def label(self) -> str:
        return f"{self.pair} · {self.row.server_point} · {self.row.load_point}"

    def as_bench_dict(self) -> dict[str, Any]:
        """The row as the bench stage's dict (what pick_best reads), tagged with its index."""
        return {**self.row.model_dump(mode="python"), "pair": self.pair, "_index": self.index}


@dataclass
class Profile:
    name: str
    slo: str
    constraints: list[slo_mod.Constraint]
    rows: list[JudgedRow] = field(default_factory=list)
    best: JudgedRow | None = None
    gated: dict[str, str] = field(default_factory=dict)
    """variant -> why the quality gates keep it from being recommended."""

    @property
    def rank_by_goodput(self) -> bool:
        return bool(slo_mod.per_request(self.constraints))

    @property
    def ranked_by(self) -> str:
        return "goodput" if self.rank_by_goodput else "output_throughput"

    def pair_rows(self, pair: str) -> list[JudgedRow]:
        return [r for r in self.rows if r.pair == pair]

    def pair_best(self, pair: str) -> JudgedRow | None:
        """The pair's own winner under this profile (quality gates do not apply within a pair)."""
        return _pick(self.pair_rows(pair), self.rank_by_goodput)

    def representative(self, pair: str) -> tuple[JudgedRow | None, bool]:
        """The row that stands for a pair: its winner, else its nearest miss (and False)."""
        best = self.pair_best(pair)
        if best is not None:
            return best, True
        measured = [r for r in self.pair_rows(pair) if r.row.measured]
        if not measured:
            rows = self.pair_rows(pair)
            return (rows[0] if rows else None), False
        metric = self.ranked_by

        def closeness(r: JudgedRow) -> tuple[int, float]:
            passes = sum(1 for v in r.verdicts if v.passed)
            value = r.row.metric(metric)
            if value is None:
                value = r.row.metric("output_throughput") or 0.0
            return passes, value

        return max(measured, key=closeness), False


def _pick(rows: Sequence[JudgedRow], rank_by_goodput: bool) -> JudgedRow | None:
    chosen = pick_best([r.as_bench_dict() for r in rows], rank_by_goodput)
    if chosen is None:
        return None
    return next(r for r in rows if r.index == chosen["_index"])


def _verdicts(results: Sequence[slo_mod.ConstraintResult]) -> list[Verdict]:
    return [
        Verdict(
            text=c.constraint.text,
            metric=c.constraint.metric,
            statistic=c.constraint.statistic,
            op=c.constraint.op,
            threshold=c.constraint.threshold,
            value=c.value,
            passed=c.passed,
            reason=c.reason,
        )
        for c in results
    ]


def _aggregate_lookup(row: BenchRow) -> Any:
    """SLO lookup from a row's aggregates only (used where raw records are missing)."""

    def lookup(metric: str, statistic: str | None) -> float | None:
        if metric in slo_mod.LATENCY_METRICS:
            stat = {"median": "p50"}.get(statistic or "", statistic)
            if stat in ("p50", "p99"):
                return row.metric(f"{metric}_{stat}_ms")
            return None
        return {
            "rps": row.metric("request_throughput"),
            "output_tps": row.metric("output_throughput"),
            "error_rate": row.metric("error_rate"),
            "goodput": None,
            "total_tps": None,
        }.get(metric)

    return lookup


def _worst(results: Sequence[PointResult]) -> PointResult:
    return min(results, key=lambda r: sum(1 for c in r.slo if c.passed))


def judge_row(
    inputs: ReportInputs,
    summary: PairSummary,
    row: BenchRow,
    text: str,
    constraints: Sequence[slo_mod.Constraint],
    confidence: float,
) -> tuple[BenchRow, list[Verdict], JudgedFrom]:
    """The row with its SLO fields under ``text`` (see the module docstring)."""
    if not row.measured:
        reasons = row.slo_reasons or ([row.error] if row.error else ["no completed request"])
        update = {"slo_passed": False if constraints else None, "slo_reasons": reasons}
        return row.model_copy(update=update), [], "not measured"
    repeats = inputs.records.get(PointKey(summary.pair, row.server_point, row.load_point), [])
    results: list[PointResult] = []
    if repeats and len(repeats) == row.repeats:
        for rep in repeats:
            results.append(
                summarize(
                    rep.records,
                    point=row.load_point,
                    scenario=rep.scenario or "",
                    shape=row.shape or {},
                    percentiles=rep.percentiles or list(DEFAULT_PERCENTILES),
                    constraints=constraints,
                )
            )
    same_as_bench = text.strip() == summary.slo.strip()
    if same_as_bench:
        verdicts = _verdicts(_worst(results).slo) if results and constraints else []
        return row, verdicts, "bench"
    if results:
        folded = fold_repeats(results, confidence=confidence, price_per_hour=summary.price_per_hour)
        update = {
            "goodput": folded["goodput"],
            "slo_passed": folded["slo_passed"],
            "slo_passes": folded.get("slo_passes"),
            "slo_reasons": folded["slo_reasons"],
        }
        if "goodput" in folded.get("intervals", {}):
            goodput = Interval.model_validate(folded["intervals"]["goodput"])
            update["intervals"] = {**row.intervals, "goodput": goodput}
        verdicts = _verdicts(_worst(results).slo) if constraints else []
        source: JudgedFrom = "records"
    else:
        checked = slo_mod.evaluate(constraints, _aggregate_lookup(row)) if constraints else []
        update = {
            "goodput": None,
            "slo_passed": all(c.passed for c in checked) if constraints else None,
            "slo_passes": None,
            "slo_reasons": [c.reason for c in checked],
        }
        verdicts = _verdicts(checked)
        source = "aggregates"
    if row.error:  # the server died during the point: never a pass (as the bench stage says)
        update["slo_passed"] = False
        update["slo_reasons"] = [*update["slo_reasons"], row.error]
    return row.model_copy(update=update), verdicts, source


def quality_gate(report: QualityReport | None, settings: ReportSettings) -> str | None:
    """Why a variant may not be recommended, or None."""
    if settings.max_perplexity_ratio is not None:
        ratio = report.perplexity_ratio if report else None
        if ratio is None:
            return "no perplexity measured (report.max_perplexity_ratio is set)"
        if ratio > settings.max_perplexity_ratio:
            return (
                f"perplexity {ratio:.3f}x the merged model's > report.max_perplexity_ratio "
                f"{settings.max_perplexity_ratio:g}"
            )
    if settings.min_heldout_accuracy is not None:
        acc = report.heldout_accuracy if report else None
        if acc is None:
            return "no held-out accuracy measured (report.min_heldout_accuracy is set)"
        if acc < settings.min_heldout_accuracy:
            return (
                f"held-out accuracy {acc:.0%} < report.min_heldout_accuracy "
                f"{settings.min_heldout_accuracy:.0%}"
            )
    return None


def profile_texts(slo: str, settings: ReportSettings) -> dict[str, str]:
    """Profile name -> constraint text; ``default`` (params `slo:`) first."""
    return {DEFAULT_PROFILE: slo, **settings.profiles}


def judge_profiles(
    inputs: ReportInputs, slo: str, settings: ReportSettings, confidence: float = 0.95
) -> list[Profile]:
    """Every profile with every row judged and its winner picked."""
    profiles = []
    for name, text in profile_texts(slo, settings).items():
        constraints = slo_mod.parse_slo(text) if text.strip() else []
        profile = Profile(name=name, slo=text, constraints=constraints)
        index = 0
        for pair_name, summary in sorted(inputs.pairs.items()):
            for row in summary.rows:
                judged, verdicts, source = judge_row(
                    inputs, summary, row, text, constraints, confidence
                )
                profile.rows.append(
                    JudgedRow(
                        pair=pair_name,
                        variant=summary.variant,
                        engine=summary.engine,
                        row=judged,
                        verdicts=verdicts,
                        judged_from=source,
                        index=index,
                    )
                )
                index += 1
        for variant in sorted({r.variant for r in profile.rows}):
            reason = quality_gate(inputs.quality.get(variant), settings)
            if reason:
                profile.gated[variant] = reason
        allowed = [r for r in profile.rows if r.variant not in profile.gated]
        profile.best = _pick(allowed, profile.rank_by_goodput)
        profiles.append(profile)
    return profiles
