"""Assemble one estimate: a variant of a model on a device under a workload."""

from __future__ import annotations

from quantbench.estimate.engines import kernel_efficiency, step_overhead
from quantbench.estimate.gpu import describe
from quantbench.estimate.hardware import hardware_rates
from quantbench.estimate.kvcache import kv_bytes_per_token, resolve_kv_dtype
from quantbench.estimate.roofline import Rates, StepCosts
from quantbench.estimate.serving import MAX_SEARCH_CONCURRENCY, ServingModel
from quantbench.estimate.spec import EstimateSettings
from quantbench.estimate.suggest import suggest_grids
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.hardware import HardwareSpec
from quantbench.schemas.roofline import (
    EstimateResult,
    HardwareUsed,
    KvCacheUsed,
    ModelShape,
    WeightBytes,
)


def overhead_ms(
    arch: ModelShape, hardware: HardwareSpec, settings: EstimateSettings, engine: str
) -> tuple[float, str]:
    """Per-step overhead: the explicit setting, else the engine's measured one, else 0."""
    explicit = settings.efficiency.step_overhead_ms
    if explicit is not None:
        return explicit, f"step overhead {explicit:g} ms set explicitly"
    if engine == "none":
        return 0.0, "engine 'none': pure roofline (0 ms/step)"
    return step_overhead(hardware, engine, arch)


def variant_rates(
    arch: ModelShape,
    weights: WeightBytes,
    hardware: HardwareSpec,
    settings: EstimateSettings,
    engine: str = "none",
) -> Rates:
    """The effective rates of ``hardware`` for this variant's compute dtype and shapes.

    Efficiencies: the explicit settings, else the engine's stand-in kernel efficiencies on
    this kind of device, else the hardware entry's.
    """
    shares = arch.streamed_shape_shares()
    kernels = kernel_efficiency(engine, hardware)
    return hardware_rates(
        hardware,
        weights.compute_dtype,
        compute_efficiency=settings.efficiency.compute or (kernels.compute if kernels else None),
        bandwidth_efficiency=settings.efficiency.bandwidth
        or (kernels.bandwidth if kernels else None),
        step_overhead_ms=overhead_ms(arch, hardware, settings, engine)[0],
        shape_bytes={shape: share * weights.streamed_bytes for shape, share in shares.items()},
    )


def serving_model(
    arch: ModelShape,
    weights: WeightBytes,
    hardware: HardwareSpec,
    settings: EstimateSettings,
    input_len: int | None = None,
    output_len: int | None = None,
    engine: str = "none",
    max_batch: int | None = None,
) -> ServingModel:
    """The serving model of a variant; lengths default to the settings' workload.

    ``max_batch``: requests the engine runs at once with its settings (``Engine.max_batch``);
    None models an engine that batches every request that comes."""
    kv_dtype = resolve_kv_dtype(settings.kv_cache_dtype, arch)
    costs = StepCosts(
        arch=arch,
        streamed_weight_bytes=weights.streamed_bytes,
        gathered_bytes_per_token=weights.gathered_bytes_per_token,
        kv_bytes_per_token=kv_bytes_per_token(arch, kv_dtype),
    )
    return ServingModel(
        costs=costs,
        rates=variant_rates(arch, weights, hardware, settings, engine),
        input_len=input_len or settings.workload.input_len,
        output_len=output_len or settings.workload.output_len,
        stored_weight_bytes=weights.stored_bytes,
        memory_bytes=hardware.memory_gb * 1e9 * settings.memory_utilization,
        max_batch=max_batch,
    )


def build_estimate(
    model: str,
    arch: ModelShape,
    variant: EstimatedVariant,
    weights: WeightBytes,
    hardware: HardwareSpec,
    settings: EstimateSettings,
    engine: str = "none",
) -> EstimateResult:
    """Run the roofline and serving model and collect the result.

    ``engine`` (resolved, not ``auto``) sets the per-step overhead added to the roofline.
    """
    serving = serving_model(arch, weights, hardware, settings, engine=engine)
    rates = serving.rates
    slo = settings.slo
    limits = serving.limits(slo.ttft_ms, slo.itl_ms)

    levels = set(settings.workload.concurrency)
    if 1 <= limits.overall <= MAX_SEARCH_CONCURRENCY:
        levels.add(limits.overall)
    points = [serving.point(c, slo.ttft_ms, slo.itl_ms) for c in sorted(levels)]
    allowed = [p for p in points if p.concurrency <= limits.overall]
    best_throughput = max(allowed, key=lambda p: p.output_tps) if allowed else None
    best_latency = (
        points[0] if points[0].concurrency == 1 else serving.point(1, slo.ttft_ms, slo.itl_ms)
    )

    kv_dtype = resolve_kv_dtype(settings.kv_cache_dtype, arch)
    notes = [*arch.notes, *rates.notes, overhead_ms(arch, hardware, settings, engine)[1]]
    kernels = kernel_efficiency(engine, hardware)
    if kernels is not None:
        notes.append(kernels.source)
    notes.append(
        f"weights: {weights.source} ({weights.detail}), {weights.bits_per_weight:.3f} bits/weight"
    )
    notes.append("means only: a roofline has no variance, so no percentiles are estimated")
    if hardware.measurement is not None:
        notes.append(
            f"measured with {hardware.measurement.threads} threads at load average "
            f"{hardware.measurement.load_average:.2f}; other load lowers the figures"
        )
    if hardware.gpu is not None:
        notes.append(f"this GPU as calibrated: {describe(hardware.gpu)}")
    return EstimateResult(
        model=model,
        architecture=arch,
        variant=variant,
        engine=engine,
        weights=weights,
        kv_cache=KvCacheUsed(dtype=kv_dtype, bytes_per_token=serving.costs.kv_bytes_per_token),
        hardware=HardwareUsed(
            name=hardware.name,
            kind=hardware.kind,
            source=hardware.source,
            memory_gb=hardware.memory_gb,
            compute_dtype=rates.compute_dtype,
            peak_tflops=rates.peak_flops / 1e12,
            compute_efficiency=rates.compute_efficiency,
            peak_bandwidth_gbs=rates.peak_bandwidth / 1e9,
            bandwidth_efficiency=rates.bandwidth_efficiency,
            step_overhead_ms=rates.step_overhead_s * 1e3,
            peak_ops_per_byte=rates.peak_ops_per_byte,
            ops_per_byte=rates.ops_per_byte,
            measurement=hardware.measurement,
        ),
        workload=settings.workload,
        slo=slo,
        memory_utilization=settings.memory_utilization,
        prefill=serving.prefill_phase(),
        decode=serving.decode_phase(),
        points=points,
        best_latency=best_latency,
        best_throughput=best_throughput,
        limits=limits,
        grids=suggest_grids(limits, settings.workload.input_len, settings.workload.output_len),
        notes=notes,
    )
