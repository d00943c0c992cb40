"""Estimate beside measurement: the roofline estimate at each measured closed-loop point.

The estimate stage runs before any benchmark, so its file usually holds estimates only, per
variant and hardware entry, at the concurrencies of ``estimate.workload``. Each measured
closed-loop point is put beside the estimate of its variant at the same concurrency (points at
concurrencies the estimate did not cover are listed as such). Where the estimate stage itself
compared measured points (``comparison.rows``), those rows are used as they are.

Ratios read as in :mod:`quantbench.estimate.compare`: measured / estimated for TTFT and TPOT,
estimated / measured for throughput, so a ratio above 1 always means reality was slower.
"""

from __future__ import annotations

from dataclasses import dataclass

from quantbench.report.inputs import PointKey, ReportInputs
from quantbench.report.profiles import Profile
from quantbench.schemas.estimate import VariantEstimate

PREFERRED_HARDWARE = "this"


@dataclass
class EstimateRow:
    pair: str
    variant: str
    engine: str
    server_point: str
    load_point: str
    concurrency: int
    hardware: str
    estimate_engine: str
    estimated_ttft_ms: float | None
    measured_ttft_ms: float | None
    estimated_tpot_ms: float | None
    measured_tpot_ms: float | None
    estimated_output_tps: float | None
    measured_output_tps: float | None
    estimate_lengths: tuple[int | None, int | None]
    measured_lengths: tuple[float | None, float | None]
    source: str = "report"
    """'report' (matched here) or 'estimate stage' (its own comparison rows)."""
    hardware_label: str = ""
    """The hardware entry's own name (``hardware`` may be the path of a saved JSON)."""

    @staticmethod
    def _ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b is not None and b > 0 else None

    @property
    def ttft_ratio(self) -> float | None:
        return self._ratio(self.measured_ttft_ms, self.estimated_ttft_ms)

    @property
    def tpot_ratio(self) -> float | None:
        return self._ratio(self.measured_tpot_ms, self.estimated_tpot_ms)

    @property
    def output_tps_ratio(self) -> float | None:
        return self._ratio(self.estimated_output_tps, self.measured_output_tps)

    @property
    def within_2x(self) -> bool | None:
        ratios = [r for r in (self.ttft_ratio, self.tpot_ratio, self.output_tps_ratio) if r]
        return all(0.5 <= r <= 2.0 for r in ratios) if ratios else None


def preferred_hardware(estimates: list[VariantEstimate]) -> str | None:
    """The hardware entry to draw: ``this`` machine when estimated, else the first entry."""
    names = [e.hardware_name for e in estimates]
    if PREFERRED_HARDWARE in names:
        return PREFERRED_HARDWARE
    return names[0] if names else None


def _measured_lengths(inputs: ReportInputs, key: PointKey) -> tuple[float | None, float | None]:
    repeats = inputs.records.get(key, [])
    done = [r for rep in repeats for r in rep.measured if r.status == "completed"]
    prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    outputs = [r.output_tokens for r in done if r.output_tokens is not None]
    return (
        sum(prompts) / len(prompts) if prompts else None,
        sum(outputs) / len(outputs) if outputs else None,
    )


def estimate_rows(inputs: ReportInputs, profile: Profile) -> tuple[list[EstimateRow], list[str]]:
    """Rows for every measured closed-loop point and hardware entry, and notes on gaps."""
    rows: list[EstimateRow] = []
    notes: list[str] = []
    by_variant: dict[str, list[VariantEstimate]] = {}
    for est in inputs.estimates:
        by_variant.setdefault(est.variant_name, []).append(est)
    stage_rows = [(est, row) for est in inputs.estimates for row in est.comparison_rows()]
    if stage_rows:
        for est, c in stage_rows:
            rows.append(
                EstimateRow(
                    pair=f"{c.variant}-{c.engine}",
                    variant=c.variant,
                    engine=c.engine,
                    server_point=c.setting or "default",
                    load_point=f"c{c.concurrency}",
                    concurrency=c.concurrency,
                    hardware=c.hardware,
                    estimate_engine=est.engine,
                    estimated_ttft_ms=c.estimated_ttft_ms,
                    measured_ttft_ms=c.measured_ttft_ms,
                    estimated_tpot_ms=c.estimated_tpot_ms,
                    measured_tpot_ms=c.measured_tpot_ms,
                    estimated_output_tps=c.estimated_output_tps,
                    measured_output_tps=c.measured_output_tps,
                    estimate_lengths=(est.workload.input_len, est.workload.output_len),
                    measured_lengths=(None, None),
                    source="estimate stage",
                    hardware_label=est.hardware.name or c.hardware,
                )
            )
        return rows, notes
    missing_variants: set[str] = set()
    for judged in profile.rows:
        row = judged.row
        if not row.measured or row.load_kind != "concurrency" or row.load_value is None:
            continue
        ests = by_variant.get(judged.variant, [])
        if not ests:
            missing_variants.add(judged.variant)
            continue
        concurrency = int(row.load_value)
        key = PointKey(judged.pair, row.server_point, row.workload, row.load_point)
        lengths = _measured_lengths(inputs, key)
        for est in ests:
            point = est.at(concurrency)
            if point is None:
                notes.append(
                    f"{judged.label}: the estimate for {judged.variant} on {est.hardware_name} has "
                    f"no concurrency {concurrency} (add it to estimate.workload.concurrency)"
                )
                continue
            rows.append(
                EstimateRow(
                    pair=judged.pair,
                    variant=judged.variant,
                    engine=judged.engine,
                    server_point=row.server_point,
                    load_point=row.load_point,
                    concurrency=concurrency,
                    hardware=est.hardware_name,
                    estimate_engine=est.engine,
                    estimated_ttft_ms=point.ttft_ms,
                    measured_ttft_ms=row.metric("ttft_p50_ms"),
                    estimated_tpot_ms=point.itl_ms,
                    measured_tpot_ms=row.metric("tpot_p50_ms"),
                    estimated_output_tps=point.output_tps,
                    measured_output_tps=row.metric("output_throughput"),
                    estimate_lengths=(est.workload.input_len, est.workload.output_len),
                    measured_lengths=lengths,
                    hardware_label=est.hardware.name or est.hardware_name,
                )
            )
    for variant in sorted(missing_variants):
        notes.append(f"no estimate for variant {variant} in reports/estimate/estimates.json")
    return rows, notes
