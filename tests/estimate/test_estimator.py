"""Whole estimates, including the published shape of seed 000's llm-optimizer example."""

from __future__ import annotations

import pytest

from quantbench.estimate.estimator import build_estimate
from quantbench.estimate.formats import nominal_weight_bytes
from quantbench.estimate.lookup import resolve_hardware
from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas.estimate_inputs import EstimatedVariant


def estimate(arch, variant, hardware, **settings):
    weights = nominal_weight_bytes(arch, variant)
    return build_estimate(
        "test",
        arch,
        variant,
        weights,
        resolve_hardware(hardware),
        EstimateSettings.model_validate(settings),
    )


def test_seed_000_shape_qwen3_4b_on_l40(qwen3_4b):
    # llm-optimizer estimate --model Qwen/Qwen3-4B --input-len 1024 --output-len 512 --gpu L40:
    # "Prefill Phase: Compute Bound", "Decode Phase: Memory Bound".
    result = estimate(
        qwen3_4b,
        EstimatedVariant(format="bf16"),
        "L40",
        workload={"input_len": 1024, "output_len": 512},
    )
    assert result.prefill.bound == "compute"
    assert result.decode.bound == "memory"
    ridge = result.hardware.peak_ops_per_byte
    assert result.prefill.intensity > ridge > result.decode.intensity
    assert result.best_latency.ttft_ms > result.best_latency.itl_ms
    # weights 8 GB on a 48 GB card: the KV cache, not compute, caps concurrency
    assert result.limits.binding == "kv_memory"


def test_qwen3_4b_decode_is_weight_streaming_at_concurrency_one(qwen3_4b):
    result = estimate(qwen3_4b, EstimatedVariant(format="bf16"), "L40")
    weights = 2 * qwen3_4b.total_params - 2 * qwen3_4b.norm_params
    seconds = weights / (864e9 * 0.8)
    # KV reads of a 1024 + 256 context add ~2 %; the estimate is the weight time and a bit
    assert seconds * 1e3 < result.best_latency.itl_ms < 1.05 * seconds * 1e3


def test_quantised_weights_decode_faster_on_a_bandwidth_bound_gpu(smol):
    bf16 = estimate(smol, EstimatedVariant(format="bf16"), "L4")
    awq = estimate(smol, EstimatedVariant(format="awq"), "L4")
    # same KV reads; the difference is the weight bytes at 80 % of 300 GB/s
    saved_ms = (bf16.weights.streamed_bytes - awq.weights.streamed_bytes) / (300e9 * 0.8) * 1e3
    assert bf16.best_latency.itl_ms - awq.best_latency.itl_ms == pytest.approx(saved_ms)
    assert awq.weights.streamed_bytes < 0.5 * bf16.weights.streamed_bytes


def test_kv_dtype_moves_the_memory_limit_not_the_weights(qwen3_4b):
    base = estimate(qwen3_4b, EstimatedVariant(format="bf16"), "L4")
    q8 = estimate(qwen3_4b, EstimatedVariant(format="bf16"), "L4", kv_cache_dtype="fp8")
    assert q8.weights == base.weights
    assert q8.limits.kv_memory == pytest.approx(2 * base.limits.kv_memory, abs=1)


def test_best_throughput_respects_the_limits(smol):
    result = estimate(smol, EstimatedVariant(format="bf16"), "H100", slo={"itl_ms": 5.0})
    best = result.best_throughput
    assert best is not None and best.concurrency <= result.limits.overall
    assert result.limits.overall in [p.concurrency for p in result.points]
    assert all(p.meets_itl_slo for p in result.points if p.concurrency <= result.limits.decode)


def test_a_long_context_on_a_small_card_fits_nothing(qwen3_4b):
    # fp32 weights take 16 of 21.6 usable GB; one 64k-token request needs 9.7 GB of KV cache
    result = estimate(
        qwen3_4b, EstimatedVariant(format="fp32"), "L4", workload={"input_len": 65536}
    )
    assert result.limits.kv_memory == 0 and result.best_throughput is None
    assert not result.points[0].fits_memory
