"""A pair whose variant the quality gate already excludes is screened: measured at its floor."""

from __future__ import annotations

from pathlib import Path

import yaml
from tests.schemas import examples

from quantbench.bench.job import screened_by_quality, screened_workload
from quantbench.bench.spec import BenchSettings
from quantbench.params import section
from quantbench.workloads.spec import workloads_section


def _params() -> dict:
    return yaml.safe_load(Path("params.yaml").read_text())


def test_the_default_run_screens_a_variant_shown_beyond_the_gate() -> None:
    params = _params()
    bench = section(params, "bench", BenchSettings)
    assert bench.quality_gated == "screen"
    gptq = examples.quality_report("gptq-w4g64", ppl=19.24)  # KL 0.182, limit 0.15
    why = screened_by_quality(params, bench, gptq)
    assert why is not None and "mean KL divergence" in why
    close = examples.quality_report("gguf-q4_k_m", 16.3, 0.02, 0.97, 12)
    assert screened_by_quality(params, bench, close) is None
    assert screened_by_quality(params, bench, None) is None  # not evaluated: measured in full


def test_full_measures_every_pair_and_no_gate_screens_nothing() -> None:
    params = _params()
    gptq = examples.quality_report("gptq-w4g64", ppl=19.24)
    full = section(params, "bench", BenchSettings).model_copy(update={"quality_gated": "full"})
    assert screened_by_quality(params, full, gptq) is None
    params["report"]["quality"] = {}
    screen = section(params, "bench", BenchSettings)
    assert screened_by_quality(params, screen, gptq) is None


def test_a_screened_workload_runs_its_first_load_at_its_precision_floor() -> None:
    # a screened pair ran every load point at its floor: the one stream's 12 serial requests
    # were most of its points' time, for rows the decision can never rank
    for name, spec in workloads_section(_params(), "params.yaml").items():
        assert spec.precision is not None and spec.precision.max_requests > 12, name
        floor = screened_workload(spec)
        assert floor.precision is not None
        assert floor.precision.max_requests == floor.precision.min_requests == 12
        assert floor.precision.targets == spec.precision.targets
        assert floor.points == spec.points[:1] and floor.points[0].concurrency == 4
    chat = workloads_section(_params(), "params.yaml")["chat"]
    assert [p.concurrency for p in chat.points] == [4, 1]
    fixed = chat.model_copy(update={"precision": None, "num_requests": 8})
    assert screened_workload(fixed).points == fixed.points[:1]
    assert screened_workload(fixed).num_requests == 8
