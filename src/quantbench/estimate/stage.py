"""What the DVC ``estimate`` stage and the CLI call: model folder + variant + hardware -> dict.

:func:`estimate_variant` returns one JSON-ready estimate (with the comparison when measured
points are given); :func:`write_estimates` runs every variant on every configured hardware
entry and writes one JSON file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from quantbench.estimate.arch import read_architecture
from quantbench.estimate.checkpoint import variant_weight_bytes
from quantbench.estimate.compare import (
    MeasuredPoint,
    compare_points,
    fit_efficiency,
    group_points,
)
from quantbench.estimate.engines import (
    canonical,
    held_weights,
    resolve_engine,
    with_engine_overhead,
)
from quantbench.estimate.estimator import build_estimate, serving_model
from quantbench.estimate.hardware import THIS_MACHINE
from quantbench.estimate.lookup import resolve_hardware
from quantbench.estimate.machine import with_shape_probes
from quantbench.estimate.pairs import BenchPair, WorkloadShape, predict_pairs
from quantbench.estimate.serving import ServingModel
from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas import io as schema_io
from quantbench.schemas.estimate import EstimatesFile, EstimateSummaryRow, VariantEstimate
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.hardware import HardwareSpec
from quantbench.schemas.roofline import EstimateResult, ModelShape, PairPrediction, WeightBytes


def _hardware(name: str, settings: EstimateSettings, remeasure: bool) -> HardwareSpec:
    measure = settings.measure
    return resolve_hardware(
        name, threads=measure.threads, cache_dir=measure.cache_dir, remeasure=remeasure
    )


def _refined(
    hardware: HardwareSpec,
    name: str,
    arch: ModelShape,
    weights: WeightBytes,
    settings: EstimateSettings,
    engines: Sequence[str],
    calibrated: bool = False,
) -> HardwareSpec:
    """For ``this`` machine: GEMV probes at the model's shapes, engine overheads (cached).

    A calibration (the ``calibrate`` stage's output) holds them all already and is used as it
    is: the stage never measures or writes a cache of its own."""
    if name.lower() != THIS_MACHINE or calibrated:
        return hardware
    cache_dir = settings.measure.cache_dir
    shapes = list(arch.streamed_shape_shares())
    hardware = with_shape_probes(hardware, weights.compute_dtype, shapes, cache_dir)
    if settings.efficiency.step_overhead_ms is None:
        for engine in engines:
            hardware = with_engine_overhead(hardware, engine, cache_dir)
    return hardware


def comparison(
    arch: ModelShape,
    weights: WeightBytes,
    hardware: HardwareSpec,
    settings: EstimateSettings,
    points: Sequence[MeasuredPoint],
    variant: EstimatedVariant | None = None,
) -> dict[str, Any]:
    """Rows (estimate beside measurement) and fits per engine, as JSON-ready dicts.

    ``weights`` are the variant's as stored; each point's engine holds them its own way
    (``held_weights``: transformers serves AWQ as bf16), given the ``variant``."""

    def serving_for(point: MeasuredPoint) -> ServingModel:
        engine = canonical(point.engine)
        held = held_weights(engine, arch, variant, weights) if variant is not None else weights
        return serving_model(
            arch, held, hardware, settings, point.input_len, point.output_len, engine,
            point.max_batch,
        )  # fmt: skip

    slo = settings.slo
    rows = compare_points(serving_for, points, slo.ttft_ms, slo.itl_ms)
    fits = [fit_efficiency(serving_for, group) for group in group_points(points).values()]
    return {
        "rows": [row.model_dump(mode="json") for row in rows],
        "fits": [fit.model_dump(mode="json") for fit in fits if fit is not None],
    }


def estimate_result(
    model_dir: Path,
    variant: EstimatedVariant,
    hardware_name: str,
    settings: EstimateSettings,
    hardware: HardwareSpec | None = None,
    extra_engines: Sequence[str] = (),
    calibrated: bool = False,
) -> tuple[EstimateResult, ModelShape, WeightBytes, HardwareSpec]:
    """The typed estimate and the pieces it was built from (the weights as the variant stores
    them; the estimate counts them as its engine holds them).

    ``extra_engines`` (those of measured points) get their overheads probed too, unless
    ``hardware`` is a calibration (``calibrated``), which is used as it is.
    """
    arch = read_architecture(model_dir)
    weights = variant_weight_bytes(arch, variant, Path(model_dir))
    spec = hardware or _hardware(hardware_name, settings, settings.measure.remeasure)
    engine = resolve_engine(settings.engine, variant.format, spec)
    held = held_weights(engine, arch, variant, weights)  # as the engine holds them
    spec = _refined(spec, hardware_name, arch, held, settings, [engine, *extra_engines], calibrated)
    result = build_estimate(str(model_dir), arch, variant, held, spec, settings, engine)
    return result, arch, weights, spec


def estimate_variant(
    model_dir: Path,
    variant: EstimatedVariant,
    hardware: str,
    settings: EstimateSettings | None = None,
    measured: Sequence[MeasuredPoint] = (),
    hardware_spec: HardwareSpec | None = None,
    calibrated: bool = False,
) -> dict[str, Any]:
    """One variant on one hardware entry, as a JSON-serialisable dict.

    Measured points of this variant (matched by name) and hardware are put beside the
    estimate under ``comparison``. ``hardware_spec`` skips resolving ``hardware`` again.
    """
    settings = settings or EstimateSettings()
    mine = [p for p in measured if p.variant == variant.name and p.hardware == hardware]
    result, arch, weights, spec = estimate_result(
        model_dir,
        variant,
        hardware,
        settings,
        hardware=hardware_spec,
        extra_engines=sorted({p.engine for p in mine}),
        calibrated=calibrated,
    )
    out = result.model_dump(mode="json")
    if mine:
        out["comparison"] = comparison(arch, weights, spec, settings, mine, variant)
    return out


def summary_row(result: dict[str, Any], hardware: str) -> dict[str, Any]:
    """The headline figures of one estimate, flat, for tables and plots."""
    one = result["best_latency"]
    best = result["best_throughput"] or {}
    limits = result["limits"]
    return {
        "variant": result["variant"]["name"],
        "hardware": hardware,
        "engine": result["engine"],
        "bits_per_weight": result["weights"]["bits_per_weight"],
        "weights_source": result["weights"]["source"],
        "prefill_bound": result["prefill"]["bound"],
        "decode_bound": (result["decode"] or {}).get("bound"),
        "ttft_ms_c1": one["ttft_ms"],
        "itl_ms_c1": one["itl_ms"],
        "decode_tps_c1": 1e3 / one["itl_ms"] if one["itl_ms"] else None,
        "best_concurrency": best.get("concurrency"),
        "best_output_tps": best.get("output_tps"),
        "limit_kv_memory": limits["kv_memory"],
        "limit_prefill_compute": limits["prefill_compute"],
        "limit_decode": limits["decode"],
        "limit_overall": limits["overall"],
    }


def write_estimates(
    model_dir: Path,
    variants: Mapping[str, EstimatedVariant] | Sequence[EstimatedVariant],
    settings: EstimateSettings,
    out_path: Path,
    measured: Sequence[MeasuredPoint] = (),
    calibration: HardwareSpec | None = None,
    pairs: Mapping[str, BenchPair] | None = None,
    workloads: Mapping[str, WorkloadShape] | None = None,
) -> EstimatesFile:
    """Every variant on every ``settings.hardware`` entry, written to one JSON file.

    The file (:class:`quantbench.schemas.estimate.EstimatesFile`) holds ``estimates`` (full
    results) and ``summary`` (one flat row each). Hardware is resolved once per entry, so
    ``this`` is measured at most once per run; with ``calibration`` (the ``calibrate`` stage's
    output) ``this`` is that, and nothing is measured. With a calibration, ``pairs`` and
    ``workloads`` also get their predictions on this machine (``estimate.pairs``): every bench
    pair, setting and closed-loop workload, as the bench will measure them.
    """
    specs = list(variants.values()) if isinstance(variants, Mapping) else list(variants)
    estimates: list[VariantEstimate] = []
    summary: list[EstimateSummaryRow] = []
    for hardware_name in settings.hardware:
        calibrated = calibration is not None and hardware_name.lower() == THIS_MACHINE
        hardware = (
            calibration
            if calibrated and calibration is not None
            else _hardware(hardware_name, settings, settings.measure.remeasure)
        )
        for variant in specs:
            out = estimate_variant(
                model_dir,
                variant,
                hardware_name,
                settings,
                measured,
                hardware_spec=hardware,
                calibrated=calibrated,
            )
            estimates.append(
                VariantEstimate.model_validate({"hardware_name": hardware_name, **out})
            )
            summary.append(EstimateSummaryRow.model_validate(summary_row(out, hardware_name)))
    predictions: list[PairPrediction] = []
    if calibration is not None and pairs and workloads:
        by_name = {v.name: v for v in specs}
        predictions = predict_pairs(
            read_architecture(model_dir), Path(model_dir), by_name, pairs, workloads,
            THIS_MACHINE, calibration, settings,
        )  # fmt: skip
    payload = EstimatesFile(estimates=estimates, summary=summary, pairs=predictions)
    schema_io.write(out_path, payload)
    return payload
