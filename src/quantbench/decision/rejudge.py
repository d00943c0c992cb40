"""Judge one bench row under an SLO profile: from its raw records, else from its aggregates.

Under the profile the bench stages judged by (``PairSummary.slos``), a row is kept as written: the
records only give its verdicts' details. Under any other profile (``report.profiles``) it is judged
the way the bench stage judges: :func:`quantbench.load.metrics.summarize` over each repeat's raw
records (every phase) with the profile's constraints (what goodput and good tokens need), then
:func:`quantbench.decision.rows.fold_repeats` and :func:`~quantbench.decision.rows.checks` (a
point passes only if every repeat does; a flagged point is never ranked). Where a point's
records are missing, its aggregate figures with their intervals answer the constraints they can,
and good tokens, which need every request, cannot be recomputed: such a row is not ranked under
a profile with per-request constraints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from quantbench import slo as slo_mod
from quantbench.decision.rows import checks, fold_repeats
from quantbench.load.metrics import PointResult, summarize
from quantbench.outputs import PointKey, ReportInputs
from quantbench.schemas.bench import BenchRow, PairSummary, ServerPoint
from quantbench.workloads.spec import DEFAULT_PERCENTILES

NO_RECORDS_FLAG = (
    "raw records missing: good output throughput under this profile cannot be recomputed"
)

JudgedFrom = Literal["bench", "records", "aggregates", "not measured"]


@dataclass(frozen=True)
class Verdict:
    """One constraint of a profile at one point (the worst repeat's)."""

    text: str
    metric: str
    statistic: str | None
    op: str
    threshold: float
    value: float | None
    low: float | None
    high: float | None
    verdict: Literal["pass", "fail", "undecided"]
    reason: str

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict[str, Any]:
        return {
            "constraint": self.text,
            "metric": self.metric,
            "statistic": self.statistic,
            "op": self.op,
            "threshold": self.threshold,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "verdict": self.verdict,
            "passed": self.passed,
            "reason": self.reason,
        }


def _verdicts(results: Sequence[slo_mod.ConstraintResult]) -> list[Verdict]:
    return [
        Verdict(
            text=c.constraint.text,
            metric=c.constraint.metric,
            statistic=c.constraint.statistic,
            op=c.constraint.op,
            threshold=c.constraint.threshold,
            value=c.value,
            low=c.low,
            high=c.high,
            verdict=c.verdict,
            reason=c.reason,
        )
        for c in results
    ]


_ORDER = {"fail": 0, "undecided": 1, "pass": 2}


def _worst(results: Sequence[PointResult]) -> PointResult:
    """The repeat that decides the row's verdict (fold_repeats takes the same one)."""
    return min(results, key=lambda r: _ORDER.get(r.slo_verdict or "fail", 0))


def served_mismatch(server: ServerPoint | None) -> str | None:
    """What the bench stage flags when the served answers differ from the evaluated variant's."""
    check = server.served_check if server is not None else None
    if check is None or check.verdict != "mismatch":
        return None
    return f"{check.mismatched} of {check.decided} certain answers differ"


def _meta(point: PointResult | None) -> dict[str, Any]:
    """What the load process wrote beside its records, as far as the run's result keeps it
    (its stop reason, its own loop lag and CPU share), for summarize's harness check."""
    if point is None:
        return {}
    meta: dict[str, Any] = {"stop_reason": point.stop_reason}
    if point.harness.loop_lag_p99_ms is not None:
        meta["loop_lag"] = {"p99_ms": point.harness.loop_lag_p99_ms}
    if point.harness.client_cpu_share is not None:
        meta["client_cpu_s"] = point.harness.client_cpu_share
        meta["client_wall_s"] = 1.0
    return meta


def row_confidence(row: BenchRow, default: float) -> float:
    """The confidence the bench stage computed the row's intervals at."""
    return next((iv.confidence for iv in row.intervals.values()), default)


def resummarize(
    inputs: ReportInputs,
    pair: str,
    row: BenchRow,
    constraints: Sequence[slo_mod.Constraint],
    confidence: float,
    as_bench: bool = False,
) -> list[PointResult]:
    """Each repeat's result of the row's point, recomputed from its raw records under
    ``constraints``; [] unless every repeat's records are there. ``as_bench``: the bench's own
    SLO, its verdicts judged at the level the bench judged them (an early-pass point's)."""
    key = PointKey(pair, row.server_point, row.workload, row.load_point)
    repeats = inputs.records.get(key, [])
    if not repeats or len(repeats) != row.repeats:
        return []
    results = []
    for rep in repeats:
        own = rep.point(row.load_point)
        records = [r for r in rep.records if r.point == row.load_point] or rep.records
        results.append(
            summarize(
                records,
                point=row.load_point,
                scenario=rep.scenario or row.workload,
                shape=own.shape if own is not None else (row.shape or {}),
                percentiles=rep.percentiles or list(DEFAULT_PERCENTILES),
                constraints=constraints,
                confidence=confidence,
                verdict_confidence=rep.verdict_confidence(confidence) if as_bench else None,
                fixed_output_length=rep.fixed_output_length,
                meta=_meta(own),
                wall_offset=(own.window.started_at_wall - own.window.start) if own else None,
            )
        )
    return results


def refold(
    results: Sequence[PointResult],
    row: BenchRow,
    summary: PairSummary,
    confidence: float,
    drift: float | None = None,
) -> BenchRow:
    """The repeats' results folded and checked into a row, as the bench stage does (``drift``:
    report.drift, which the bench stage pools repeats with)."""
    folded = fold_repeats(
        results,
        workload=row.workload,
        confidence=confidence,
        price_per_hour=summary.price_per_hour,
        possible_cache_share=row.cache.possible_share if row.cache else None,
        drift=drift,
    )
    folded.update(
        server_point=row.server_point,
        settings=row.settings,
        command=row.command,
        env=row.env,
        load_point=row.load_point,
        shape=row.shape,
        error=row.error,
    )
    if row.gpu is not None:  # the GPUs' counters are not in the records: the bench's own
        folded["gpu"] = row.gpu.model_dump()
    checks(folded, served_mismatch(summary.server(row.server_point)))
    return BenchRow.model_validate(folded)


def _aggregate_lookup(row: BenchRow) -> slo_mod.Lookup:
    """SLO lookup from a row's aggregates and their intervals (used where records are missing)."""

    def figure(name: str, why: str | None = None) -> Any:
        value = row.metric(name)
        if why is not None:
            return (value, None, None, why)
        iv = row.intervals.get(name)
        if value is not None and iv is not None:
            return (value, iv.low, iv.high, None)
        return value

    def lookup(metric: str, statistic: str | None) -> Any:
        if metric in slo_mod.LATENCY_METRICS:
            stat = {"median": "p50"}.get(statistic or "", statistic)
            name = f"{metric}_{stat}_ms"
            if name in row.too_few:
                return figure(name, f"too few requests for {stat}")
            return figure(name) if name in type(row).model_fields else None
        return {
            "rps": lambda: figure("request_throughput"),
            "output_tps": lambda: figure("output_throughput"),
            "error_rate": lambda: figure("error_rate"),
        }.get(metric, lambda: None)()

    return lookup


def _from_aggregates(
    row: BenchRow, summary: PairSummary, constraints: Sequence[slo_mod.Constraint]
) -> tuple[BenchRow, list[Verdict]]:
    checked = slo_mod.evaluate(constraints, _aggregate_lookup(row)) if constraints else []
    verdict = slo_mod.overall(checked)
    data = row.model_dump(mode="python")
    # good requests are per request: without the records they cannot be counted for this SLO
    intervals = {
        k: v for k, v in data["intervals"].items() if k not in ("goodput", "good_output_throughput")
    }
    data.update(
        intervals=intervals,
        goodput=None,
        good_output_throughput=None,
        slo_verdict=verdict,
        slo_passed=None if verdict is None else verdict == "pass",
        slo_passes=None,
        slo_reasons=[c.reason for c in checked],
    )
    checks(data, served_mismatch(summary.server(row.server_point)))
    if slo_mod.per_request(constraints):
        data["flags"] = [*data["flags"], NO_RECORDS_FLAG]
        data["rankable"] = False
    return BenchRow.model_validate(data), _verdicts(checked)


def judge_row(
    inputs: ReportInputs,
    summary: PairSummary,
    row: BenchRow,
    slo: slo_mod.Slo,
    confidence: float,
    as_bench: bool,
    drift: float | None = None,
) -> tuple[BenchRow, list[Verdict], JudgedFrom]:
    """The row under ``slo`` (see the module docstring); ``as_bench``: the bench stage's own
    profile, whose rows are kept as written (the records only give the verdicts' details);
    ``drift``: what repeats are pooled with (:func:`refold`)."""
    constraints = slo.constraints
    if not row.measured:
        return row, [], "not measured"
    confidence = row_confidence(row, confidence)
    results = resummarize(inputs, summary.pair, row, constraints, confidence, as_bench)
    if as_bench:
        verdicts = _verdicts(_worst(results).slo) if results and constraints else []
        return row, verdicts, "bench"
    if results:
        verdicts = _verdicts(_worst(results).slo) if constraints else []
        return refold(results, row, summary, confidence, drift), verdicts, "records"
    judged, verdicts = _from_aggregates(row, summary, constraints)
    return judged, verdicts, "aggregates"


__all__ = [
    "NO_RECORDS_FLAG",
    "JudgedFrom",
    "Verdict",
    "judge_row",
    "refold",
    "resummarize",
    "row_confidence",
    "served_mismatch",
]
