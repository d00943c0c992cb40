"""The estimate follows the pipeline's `slo:` and `workloads:` unless `estimate:` sets its own."""

from __future__ import annotations

import pytest
from tests.schemas import examples

from quantbench.estimate.pipeline import follow_pipeline, slo_targets, traffic_workload
from quantbench.estimate.spec import EstimateSettings
from quantbench.slo import NO_SLO, Slo
from quantbench.workloads.spec import WorkloadSpec

SUMMARY = examples.workload_means(23.9, 33.4)


def workloads() -> dict[str, WorkloadSpec]:
    chat = WorkloadSpec(
        name="chat", use="chat", num_requests=12,
        load=[{"kind": "concurrency", "concurrency": 1}, {"kind": "concurrency", "concurrency": 6}],
    )  # fmt: skip
    burst = WorkloadSpec(
        name="burst", use="chat", num_requests=12, load=[{"kind": "rate", "rate": 2.0}]
    )
    return {"chat": chat, "burst": burst}


def test_the_slo_targets_are_the_pipelines_tightest_limits() -> None:
    slo = slo_targets(Slo("ttft:p90<=2s; tpot:p50<=150ms; itl:p99<120ms; error_rate<=0.1"))
    assert (slo.ttft_ms, slo.itl_ms) == (2000.0, 120.0)
    open_itl = slo_targets(Slo("ttft:p95<=500ms; output_tps>=10"))
    assert open_itl.ttft_ms == 500.0 and open_itl.itl_ms == EstimateSettings().slo.itl_ms
    assert slo_targets(NO_SLO) == EstimateSettings().slo


def test_the_workload_is_the_first_workloads_traffic_at_every_measured_load() -> None:
    wl = traffic_workload(workloads(), {"chat": SUMMARY, "burst": SUMMARY})
    assert (wl.input_len, wl.output_len) == (24, 33)
    assert wl.concurrency == [1, 2, 4, 6, 8, 16]


def test_what_estimate_sets_itself_wins() -> None:
    text = Slo("ttft:p90<=2s; tpot:p50<=150ms")
    summaries = {"chat": SUMMARY, "burst": SUMMARY}
    followed = follow_pipeline(EstimateSettings(), text, workloads(), summaries)
    assert (followed.slo.ttft_ms, followed.slo.itl_ms) == (2000.0, 150.0)
    assert followed.workload.input_len == 24
    own = EstimateSettings.model_validate(
        {"slo": {"ttft_ms": 700}, "workload": {"input_len": 128, "output_len": 32}}
    )
    kept = follow_pipeline(own, text, workloads(), summaries)
    assert kept.slo.ttft_ms == 700 and kept.slo.itl_ms == pytest.approx(100.0)
    assert (kept.workload.input_len, kept.workload.output_len) == (128, 32)
