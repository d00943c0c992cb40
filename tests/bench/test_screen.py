"""A pair whose variant the quality gate already excludes is screened: measured at its floor."""

from __future__ import annotations

from tests.schemas import examples

from quantbench.bench.job import screened_by_quality, screened_workload
from quantbench.config import Config, load_config


def _config(**update: object) -> Config:
    return load_config("params.yaml").model_copy(update=update)


def test_the_default_run_screens_a_variant_shown_beyond_the_gate() -> None:
    config = _config()
    assert config.bench.quality_gated == "screen"
    gptq = examples.quality_report("gptq-w4g64", ppl=19.24)  # KL 0.182, limit 0.15
    why = screened_by_quality(config, gptq)
    assert why is not None and "mean KL divergence" in why
    close = examples.quality_report("gguf-q4_k_m", 16.3, 0.02, 0.97, 12)
    assert screened_by_quality(config, close) is None
    assert screened_by_quality(config, None) is None  # not evaluated: measured in full


def test_full_measures_every_pair_and_no_gate_screens_nothing() -> None:
    config = _config()
    gptq = examples.quality_report("gptq-w4g64", ppl=19.24)
    full = config.bench.model_copy(update={"quality_gated": "full"})
    assert screened_by_quality(_config(bench=full), gptq) is None
    no_gate = config.report.model_copy(update={"quality": {}})
    assert screened_by_quality(_config(report=no_gate), gptq) is None


def test_a_screened_workload_runs_its_first_load_at_its_precision_floor() -> None:
    # a screened pair ran every load point at its floor: the one stream's 12 serial requests
    # were most of its points' time, for rows the decision can never rank
    workloads = _config().workloads
    for name, spec in workloads.items():
        assert spec.precision is not None and spec.precision.max_requests > 12, name
        floor = screened_workload(spec)
        assert floor.precision is not None
        assert floor.precision.max_requests == floor.precision.min_requests == 12
        assert floor.precision.targets == spec.precision.targets
        assert floor.points == spec.points[:1] and floor.points[0].concurrency == 4
    chat = workloads["chat"]
    assert [p.concurrency for p in chat.points] == [4, 1]
    fixed = chat.model_copy(update={"precision": None, "num_requests": 8})
    assert screened_workload(fixed).points == fixed.points[:1]
    assert screened_workload(fixed).num_requests == 8
