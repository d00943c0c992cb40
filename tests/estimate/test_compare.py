"""Estimate vs measurement, and fitting efficiencies back from measurements."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from tests.schemas import examples

from quantbench.estimate.compare import (
    MeasuredPoint,
    ProbeSpan,
    compare_points,
    fit_efficiency,
    group_points,
    load_measured,
)
from quantbench.estimate.roofline import Rates, StepCosts
from quantbench.estimate.serving import ServingModel


def serving(arch, input_len=64, output_len=32, bandwidth=1e5, overhead=0.0):
    costs = StepCosts(
        arch=arch,
        streamed_weight_bytes=2896.0,
        gathered_bytes_per_token=16.0,
        kv_bytes_per_token=32.0,
    )
    rates = Rates(
        compute_dtype="bf16",
        peak_flops=1e6,
        peak_bandwidth=bandwidth,
        compute_efficiency=1.0,
        bandwidth_efficiency=1.0,
        step_overhead_s=overhead,
    )
    return ServingModel(
        costs=costs,
        rates=rates,
        input_len=input_len or 64,
        output_len=output_len or 32,
        stored_weight_bytes=2896.0,
        memory_bytes=1e9,
    )


def measured_from(model: ServingModel, concurrency: int, **extra) -> MeasuredPoint:
    """A 'measurement' produced by a model with different (true) figures."""
    point = model.point(concurrency, 1e9, 1e9)
    return MeasuredPoint(
        variant="v",
        engine="e",
        concurrency=concurrency,
        ttft_ms=point.ttft_ms,
        tpot_ms=point.itl_ms,
        output_tps=point.output_tps,
        **extra,
    )


def test_ratios_point_the_same_way(tiny):
    estimate = serving(tiny)
    slower_reality = serving(tiny, bandwidth=0.6e5)  # memory-bound steps take 1/0.6 as long
    points = [measured_from(slower_reality, 1)]
    row = compare_points(lambda p: estimate, points, 1e9, 1e9)[0]
    assert row.tpot_ratio == pytest.approx(1 / 0.6, rel=0.02)
    assert row.output_tps_ratio > 1.0 and row.ttft_ratio >= 1.0
    assert row.within_2x
    far = compare_points(lambda p: serving(tiny, bandwidth=1e7), points, 1e9, 1e9)[0]
    assert far.tpot_ratio > 2.0 and not far.within_2x


def test_fit_recovers_bandwidth_and_overhead(tiny):
    truth = serving(tiny, bandwidth=4e4, overhead=0.003)
    points = [measured_from(truth, c) for c in (1, 2, 4)]
    fit = fit_efficiency(lambda p: serving(tiny), points)
    assert fit.decode_points == 3
    assert fit.effective_bandwidth_gbs * 1e9 == pytest.approx(4e4, rel=0.05)
    assert fit.bandwidth_efficiency == pytest.approx(0.4, rel=0.05)
    assert fit.step_overhead_ms == pytest.approx(3.0, rel=0.05)


def test_single_point_fit_is_bandwidth_only(tiny):
    truth = serving(tiny, bandwidth=5e4)
    fit = fit_efficiency(lambda p: serving(tiny), [measured_from(truth, 1)])
    assert fit.step_overhead_ms == 0.0
    assert fit.effective_bandwidth_gbs * 1e9 == pytest.approx(5e4, rel=0.05)


def test_compute_bound_prefill_gives_compute_efficiency(tiny):
    estimate = serving(tiny, input_len=512, bandwidth=1e9)
    assert bool(estimate.prompt_alone().compute_bound(estimate.rates))
    flops = float(estimate.prompt_alone().flops)
    point = MeasuredPoint(variant="v", engine="e", concurrency=1, ttft_ms=flops / 2.5e5 * 1e3)
    fit = fit_efficiency(lambda p: estimate, [point])
    assert fit.compute_efficiency == pytest.approx(0.25)
    assert fit.decode_points == 0


def test_point_lengths_reach_the_estimate(tiny):
    seen = []

    def serving_for(point):
        seen.append((point.input_len, point.output_len))
        return serving(tiny, point.input_len, point.output_len)

    point = MeasuredPoint(
        variant="v", engine="e", concurrency=1, tpot_ms=1.0, input_len=7, output_len=9
    )
    compare_points(serving_for, [point], 1e9, 1e9)
    assert seen == [(7, 9)]


def test_points_need_a_figure_and_load_from_json(tmp_path):
    with pytest.raises(ValidationError, match="none of"):
        MeasuredPoint(variant="v", engine="e", concurrency=1)
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps(
            {
                "points": [
                    {"variant": "v", "engine": "llamacpp", "concurrency": 2, "tpot_ms": 5.0},
                    {"variant": "v", "engine": "vllm", "concurrency": 2, "output_tps": 50.0},
                ]
            }
        )
    )
    points = load_measured(path)
    assert [p.engine for p in points] == ["llamacpp", "vllm"]
    assert list(group_points(points)) == [("v", "llamacpp", "this"), ("v", "vllm", "this")]


def test_fit_with_nothing_to_fit(tiny):
    point = MeasuredPoint(variant="v", engine="e", concurrency=3, output_tps=10.0)
    fit = fit_efficiency(lambda p: serving(tiny), [point])
    assert fit.effective_bandwidth_gbs is None and "no memory-bound" in fit.explanation
    assert fit_efficiency(lambda p: serving(tiny), []) is None
    assert fit.decode_points == 0 and fit.prefill_points == 0


def test_a_probe_span_is_what_the_probe_ran_and_judges_figures_against_it():
    probed = examples.pair_calibration()  # parallel=4: alone at 43-218 tokens, then 2-4 together
    span = ProbeSpan.from_probe(probed.server_point, probed.requests, probed.fit)
    assert span == ProbeSpan("parallel=4", max_batch=4, prompt_tokens=(43, 218), max_context=250)
    for c in (1, 4):
        assert span.judge("parallel=4", c, 60.0, 34.0).in_sample
    beyond = span.judge("parallel=4", 8, 60.0, 34.0)
    assert not beyond.in_sample and beyond.label == "out-of-sample"
    assert beyond.reason == "8 streams, beyond the probe's 4"
    assert "the probe ran parallel=4" in span.judge("parallel=1", 1, 60.0, 34.0).reason
    assert (
        "prompt 20 tokens, outside the probe's 43-218" in span.judge("parallel=4", 1, 20, 34).reason
    )
    assert "context 400 tokens" in span.judge("parallel=4", 1, 200.0, 200.0).reason
    assert span.judge("parallel=4", 1, None, None).reason == "lengths unknown"
    # a probe that failed fitted nothing: there is no span to be inside of
    assert ProbeSpan.from_probe("parallel=4", probed.requests, None) is None
