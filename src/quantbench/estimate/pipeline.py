"""What the estimate takes from the rest of the pipeline unless ``estimate:`` says otherwise.

The SLO and the traffic are set once, at the top of params.yaml (``slo:`` and ``workloads:``):
the estimate's own ``estimate.slo`` and ``estimate.workload`` are overrides, not a second place
to keep them in step. Without them the estimate aims at the pipeline's SLO (its TTFT and its
TPOT or ITL limits) and at the first workload's traffic as generated (its mean prompt and output
tokens in ``reports/workloads/<name>.json``), at every closed-loop concurrency the workloads
measure and at the powers of two up to 16 beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas.estimate_inputs import EstimateWorkload, SloSpec
from quantbench.schemas.workloads import WorkloadSummary
from quantbench.slo import Constraint, Slo
from quantbench.workloads.spec import ClosedLoop, WorkloadSpec

BESIDE = (1, 2, 4, 8, 16)
"""Concurrencies the estimate reports beside the measured ones: where the next points would be."""


def slo_targets(slo: Slo, default: SloSpec | None = None) -> SloSpec:
    """The estimate's TTFT and ITL targets from an SLO (``ttft:p90<=2s; tpot:p50<=150ms``).

    The estimator has one TTFT and one per-token target; the tightest upper limit on each is
    taken (TPOT and ITL are both per-token times). A metric the SLO leaves open keeps the
    default's target."""
    base = default or SloSpec()
    upper = [c for c in slo.constraints if c.op in ("<", "<=")]

    def tightest(metrics: Sequence[str], fallback: float) -> float:
        found: list[Constraint] = [c for c in upper if c.metric in metrics]
        return min((c.threshold for c in found), default=fallback)

    return SloSpec(
        ttft_ms=tightest(("ttft",), base.ttft_ms), itl_ms=tightest(("tpot", "itl"), base.itl_ms)
    )


def traffic_workload(
    workloads: Mapping[str, WorkloadSpec], summaries: Mapping[str, WorkloadSummary | None]
) -> EstimateWorkload:
    """The first workload's mean lengths, at the concurrencies every workload measures."""
    first = next(iter(workloads))
    summary = summaries.get(first)
    if summary is None:
        raise EstimateInputError(
            f"workload {first!r} has no summary (reports/workloads/{first}.json): run "
            "`dvc repro workloads`, or set estimate.workload"
        )
    measured = {
        p.concurrency
        for spec in workloads.values()
        for p in spec.points
        if isinstance(p, ClosedLoop)
    }
    return EstimateWorkload(
        input_len=max(1, round(summary.mean("input_tokens", 1.0))),
        output_len=max(1, round(summary.mean("output_tokens", 1.0))),
        concurrency=sorted(measured | set(BESIDE)),
    )


def follow_pipeline(
    settings: EstimateSettings,
    slo: Slo,
    workloads: Mapping[str, WorkloadSpec],
    summaries: Mapping[str, WorkloadSummary | None],
) -> EstimateSettings:
    """``settings`` with the SLO and workload the pipeline sets, where ``estimate:`` sets none."""
    update: dict[str, Any] = {}
    if "slo" not in settings.model_fields_set:
        update["slo"] = slo_targets(slo)
    if "workload" not in settings.model_fields_set and workloads:
        update["workload"] = traffic_workload(workloads, summaries)
    return settings.model_copy(update=update) if update else settings
