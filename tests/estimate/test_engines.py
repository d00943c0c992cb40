"""Engine choice and per-step overhead."""

from __future__ import annotations

import pytest

from quantbench.engines import llamacpp as llamacpp_engine
from quantbench.engines import transformers as transformers_engine
from quantbench.estimate import engines
from quantbench.estimate.engines import resolve_engine, step_overhead
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.estimator import build_estimate
from quantbench.estimate.formats import nominal_weight_bytes
from quantbench.estimate.lookup import resolve_hardware
from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.hardware import EngineOverhead

from .conftest import fake_cpu


def cpu_with_transformers_overhead(per_layer=0.3, per_step=0.5):
    cpu = fake_cpu()
    overhead = EngineOverhead(per_layer_ms=per_layer, per_step_ms=per_step, version="t", method="m")
    measurement = cpu.measurement.model_copy(
        update={"engine_overheads": {"transformers": overhead}}
    )
    return cpu.model_copy(update={"measurement": measurement})


def test_auto_picks_the_engine_by_device_and_format():
    cpu, gpu = fake_cpu(), resolve_hardware("L4")
    assert resolve_engine("auto", "gguf", cpu) == "llamacpp"
    assert resolve_engine("auto", "awq", cpu) == "transformers"
    # auto picks among the engines that serve the format: GGUF is llama.cpp's on a GPU too
    assert resolve_engine("auto", "gguf", gpu) == "llamacpp"
    assert resolve_engine("auto", "awq", gpu) == "vllm"
    assert resolve_engine("auto", "fp16", cpu) == "transformers"  # no engine of its own
    assert resolve_engine("llama.cpp", "gguf", gpu) == "llamacpp"
    assert resolve_engine("hf-generate-proxy", "bf16", gpu) == "transformers"
    with pytest.raises(EstimateInputError, match="'tgi'"):
        resolve_engine("tgi", "bf16", cpu)


def test_overhead_scales_with_depth(smol, tiny):
    cpu = cpu_with_transformers_overhead()
    assert step_overhead(cpu, "transformers", smol)[0] == pytest.approx(0.5 + 30 * 0.3)
    assert step_overhead(cpu, "transformers", tiny)[0] == pytest.approx(0.5 + 2 * 0.3)
    value, source = step_overhead(cpu, "llamacpp", smol)
    assert value == 0.0 and "pure roofline" in source


def test_estimates_add_the_overhead_unless_told_otherwise(smol):
    cpu = cpu_with_transformers_overhead()
    variant = EstimatedVariant(format="bf16")
    weights = nominal_weight_bytes(smol, variant)
    settings = EstimateSettings(workload={"concurrency": [1]})
    plain = build_estimate("m", smol, variant, weights, cpu, settings, "none")
    engine = build_estimate("m", smol, variant, weights, cpu, settings, "transformers")
    assert engine.best_latency.itl_ms - plain.best_latency.itl_ms == pytest.approx(9.5)
    assert engine.hardware.step_overhead_ms == pytest.approx(9.5)
    explicit = EstimateSettings(workload={"concurrency": [1]}, efficiency={"step_overhead_ms": 1})
    forced = build_estimate("m", smol, variant, weights, cpu, explicit, "transformers")
    assert forced.hardware.step_overhead_ms == 1.0


def test_only_transformers_is_probed(monkeypatch):
    def boom(threads):
        raise AssertionError("must not measure")

    monkeypatch.setattr(transformers_engine, "measure_overhead", boom)
    cpu = fake_cpu()
    assert engines.with_engine_overhead(cpu, "llamacpp") is cpu
    assert engines.with_engine_overhead(resolve_hardware("L4"), "transformers").kind == "gpu"
    measured = cpu_with_transformers_overhead()
    assert engines.with_engine_overhead(measured, "transformers") is measured


@pytest.mark.slow
def test_transformers_overhead_probe():
    overhead = transformers_engine.measure_overhead(threads=1)
    # eager PyTorch: tens of microseconds to a few milliseconds per layer on any CPU
    assert 0.01 < overhead.per_layer_ms < 5
    assert overhead.per_step_ms < 50


def test_llamacpp_kernel_efficiencies_apply_on_cpus_only(smol):
    variant = EstimatedVariant(format="gguf", gguf_type="Q8_0")
    weights = nominal_weight_bytes(smol, variant)
    settings = EstimateSettings(workload={"concurrency": [1]})
    cpu = build_estimate("m", smol, variant, weights, fake_cpu(), settings, "llamacpp")
    assert (cpu.hardware.compute_efficiency, cpu.hardware.bandwidth_efficiency) == (
        llamacpp_engine.CPU_KERNELS.compute,
        llamacpp_engine.CPU_KERNELS.bandwidth,
    )
    assert any("calibrated" in note for note in cpu.notes)
    gpu = build_estimate("m", smol, variant, weights, resolve_hardware("L4"), settings, "llamacpp")
    assert gpu.hardware.bandwidth_efficiency == 0.8
    explicit = EstimateSettings(workload={"concurrency": [1]}, efficiency={"bandwidth": 0.9})
    forced = build_estimate("m", smol, variant, weights, fake_cpu(), explicit, "llamacpp")
    assert forced.hardware.bandwidth_efficiency == 0.9


def test_awq_on_transformers_is_counted_as_the_bf16_it_holds(smol):
    """transformers decompresses AWQ (and W8A8) to bf16 when it loads it: the estimate counted
    4-bit bytes and came out 2.58x too fast. vLLM keeps the packed weights."""
    from quantbench.estimate.engines import held_weights

    awq = EstimatedVariant(name="awq-w4g64", format="awq", bits=4, group_size=64, sym=False)
    stored = nominal_weight_bytes(smol, awq)
    bf16 = nominal_weight_bytes(smol, EstimatedVariant(format="bf16"))
    on_transformers = held_weights("transformers", smol, awq, stored)
    assert on_transformers.streamed_bytes == bf16.streamed_bytes
    assert on_transformers.stored_bytes == bf16.stored_bytes
    assert "awq held as bf16 by transformers" in on_transformers.detail
    assert held_weights("vllm", smol, awq, stored) is stored
    gptq = EstimatedVariant(format="gptq")
    assert held_weights("transformers", smol, gptq, nominal_weight_bytes(smol, gptq)).compute_dtype
    settings = EstimateSettings(workload={"concurrency": [1]})
    slow = build_estimate("m", smol, awq, on_transformers, fake_cpu(), settings, "transformers")
    fast = build_estimate("m", smol, awq, stored, fake_cpu(), settings, "transformers")
    assert slow.best_latency.itl_ms > 2 * fast.best_latency.itl_ms
