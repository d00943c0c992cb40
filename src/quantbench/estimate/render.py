"""Plain-text rendering of an estimate (and its comparison) for the terminal."""

from __future__ import annotations

from typing import Any

from quantbench.schemas.roofline import EstimateResult


def si(value: float, unit: str = "") -> str:
    """Engineering notation: 1.2 G, 345 M, 6.7 k."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def render(result: EstimateResult) -> str:
    """The analysis as printed by ``quantbench estimate``."""
    a, w, hw, wl = result.architecture, result.weights, result.hardware, result.workload
    mlp = "gated" if a.gated_mlp else "plain"
    head = "tied head" if a.tie_word_embeddings else "separate head"
    lines = [
        "=== Configuration ===",
        f"Model:    {result.model} ({a.model_type}, {si(a.total_params)} params, {a.num_layers} "
        f"layers, {a.num_heads} heads / {a.num_kv_heads} KV heads x {a.head_dim}, "
        f"{mlp} MLP {a.intermediate_size}, {head})",
        f"Variant:  {result.variant.name}: {w.bits_per_weight:.2f} bits/weight, "
        f"{si(w.stored_bytes, 'B')} stored, {si(w.streamed_bytes, 'B')} read per step "
        f"[{w.source}: {w.detail}]",
        f"KV cache: {result.kv_cache.dtype}, {si(result.kv_cache.bytes_per_token, 'B')}/token",
        f"Hardware: {hw.name} - {hw.source}",
        f"          {hw.compute_dtype} {hw.peak_tflops:.4g} TFLOP/s x {hw.compute_efficiency:.2f}, "
        f"{hw.peak_bandwidth_gbs:.4g} GB/s x {hw.bandwidth_efficiency:.2f}, "
        f"overhead {hw.step_overhead_ms:g} ms/step, memory {hw.memory_gb:.1f} GB x "
        f"{result.memory_utilization:g}",
        f"Workload: {wl.input_len} in / {wl.output_len} out; SLOs: TTFT {result.slo.ttft_ms:g} ms, "
        f"ITL {result.slo.itl_ms:g} ms",
        "",
        "=== Roofline (one request) ===",
        f"Hardware ops/byte: {hw.peak_ops_per_byte:.1f} (peak), {hw.ops_per_byte:.1f} "
        "(after efficiencies)",
        f"Prefill: {si(result.prefill.flops, 'FLOP')}, {si(result.prefill.bytes, 'B')}, "
        f"intensity {result.prefill.intensity:.1f} -> {result.prefill.bound}-bound, "
        f"{_ms(result.prefill.time_ms)} ms",
    ]
    if result.decode is not None:
        lines.append(
            f"Decode:  {si(result.decode.flops, 'FLOP')}, {si(result.decode.bytes, 'B')} per "
            f"step (mean over the output), intensity {result.decode.intensity:.2f} -> "
            f"{result.decode.bound}-bound, {_ms(result.decode.time_ms)} ms/token"
        )
    lines += [
        "",
        "=== Per concurrency (closed loop, means) ===",
        f"{'conc':>6} {'TTFT ms':>9} {'ITL ms':>8} {'first..last':>15} {'out tok/s':>10} "
        f"{'req/s':>8} {'decode':>8} {'KV GB':>8}  flags",
    ]
    for p in result.points:
        span = f"{_ms(p.itl_first_ms)}..{_ms(p.itl_last_ms)}"
        flags = [
            flag
            for flag, bad in (
                ("no-memory", not p.fits_memory),
                ("ttft>slo", not p.meets_ttft_slo),
                ("itl>slo", not p.meets_itl_slo),
            )
            if bad
        ]
        lines.append(
            f"{p.concurrency:>6} {_ms(p.ttft_ms):>9} {_ms(p.itl_ms):>8} {span:>15} "
            f"{p.output_tps:>10.1f} {p.request_rate:>8.3f} {p.decode_bound or '-':>8} "
            f"{p.kv_cache_gb:>8.3f}  {','.join(flags)}"
        )
    lim = result.limits
    compute_bound_from = lim.decode_compute_bound_from or "never"
    lines += [
        "",
        "=== Concurrency limits ===",
        f"KV-cache memory:        {lim.kv_memory}",
        f"Prefill compute (TTFT): {lim.prefill_compute}",
        f"Decode (ITL):           {lim.decode}",
        f"Overall:                {lim.overall} (binding: {lim.binding})",
        f"Decode compute-bound from concurrency: {compute_bound_from}",
    ]
    if result.best_throughput is not None:
        b = result.best_throughput
        lines.append(
            f"Best throughput within limits: {b.output_tps:.1f} output tok/s at concurrency "
            f"{b.concurrency}"
        )
    lines += ["", "=== Suggested sweep grids ===", f"concurrency: {result.grids.concurrency}"]
    lines += [f"{engine}: {grid}" for engine, grid in result.grids.engines.items()]
    lines += ["", "Notes:", *(f"- {note}" for note in result.notes)]
    return "\n".join(lines)


def render_comparison(comparison: dict[str, Any]) -> str:
    """Estimate beside measurement, and the fitted efficiencies."""
    lines = [
        "=== Estimate vs measured (ratios > 1: the estimate was optimistic) ===",
        f"{'variant':<14} {'engine':<18} {'conc':>5} {'TTFT est/meas':>17} {'TPOT est/meas':>15} "
        f"{'tok/s est/meas':>17} {'ratios':>17}  2x?",
    ]
    for r in comparison["rows"]:
        proxy = " (proxy)" if r["proxy"] else ""
        ratios = "/".join(
            "-" if r[k] is None else f"{r[k]:.2f}"
            for k in ("ttft_ratio", "tpot_ratio", "output_tps_ratio")
        )
        lines.append(
            f"{r['variant']:<14} {r['engine'] + proxy:<18} {r['concurrency']:>5} "
            f"{_ms(r['estimated_ttft_ms']) + '/' + _ms(r['measured_ttft_ms']):>17} "
            f"{_ms(r['estimated_tpot_ms']) + '/' + _ms(r['measured_tpot_ms']):>15} "
            f"{r['estimated_output_tps']:>8.1f}/{_ms(r['measured_output_tps']):<8} "
            f"{ratios:>17}  {'yes' if r['within_2x'] else 'NO'}"
        )
    for fit in comparison["fits"]:
        lines.append(f"fit {fit['variant']}/{fit['engine']}: {fit['explanation']}")
    return "\n".join(lines)
