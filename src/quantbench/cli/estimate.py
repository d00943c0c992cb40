"""``quantbench estimate``: arguments and the command body.

The top-level CLI adds these arguments to its ``estimate`` sub-parser with
:func:`add_estimate_arguments` and calls :func:`run_estimate` (passing the project's variant
table so ``--variant`` accepts its names).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from quantbench.estimate.compare import MeasuredPoint, load_measured
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.hardware import known_hardware
from quantbench.estimate.kvcache import KV_CACHE_DTYPES
from quantbench.estimate.proxy import PROXY_ENGINE, measure_hf_generate
from quantbench.estimate.render import render, render_comparison
from quantbench.estimate.spec import (
    EfficiencyOverrides,
    EstimateSettings,
    MeasureSettings,
    engine_choices,
)
from quantbench.estimate.stage import comparison, estimate_result
from quantbench.estimate.variants import parse_variant
from quantbench.fsutil import write_json
from quantbench.schemas.estimate_inputs import EstimatedVariant, EstimateWorkload, SloSpec

_DEFAULT_WORKLOAD = EstimateWorkload()
_DEFAULT_SLO = SloSpec()


def _int_list(text: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers"
        ) from None


def add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``estimate`` options to ``parser``."""
    parser.add_argument("--model", type=Path, required=True, help="HF model folder (config.json)")
    parser.add_argument(
        "--variant",
        default="auto",
        help="variant name, 'auto' (the folder's own format), a .gguf file, a quantised folder, "
        "a GGUF type (Q4_K_M), or a format (bf16, gptq, awq:bits=4,group_size=64,sym=false)",
    )
    parser.add_argument(
        "--hardware", default="this", help=f"one of {known_hardware()} or a saved hardware JSON"
    )
    parser.add_argument("--input-len", type=int, default=_DEFAULT_WORKLOAD.input_len)
    parser.add_argument("--output-len", type=int, default=_DEFAULT_WORKLOAD.output_len)
    parser.add_argument(
        "--concurrency",
        type=_int_list,
        default=_DEFAULT_WORKLOAD.concurrency,
        help="comma-separated concurrency levels to report",
    )
    parser.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    parser.add_argument("--ttft-slo-ms", type=float, default=_DEFAULT_SLO.ttft_ms)
    parser.add_argument("--itl-slo-ms", type=float, default=_DEFAULT_SLO.itl_ms)
    parser.add_argument(
        "--memory-utilization",
        type=float,
        default=EstimateSettings.model_fields["memory_utilization"].default,
    )
    parser.add_argument("--compute-efficiency", type=float, help="override the hardware's")
    parser.add_argument("--bandwidth-efficiency", type=float, help="override the hardware's")
    parser.add_argument(
        "--step-overhead-ms",
        type=float,
        help="fixed cost per step; default: the engine's measured overhead here, else 0",
    )
    parser.add_argument(
        "--engine",
        default="auto",
        choices=engine_choices(),
        help="engine whose per-step overhead to add (auto: by device and format)",
    )
    parser.add_argument("--threads", type=int, help="threads for --hardware this (default: all)")
    parser.add_argument("--cache-dir", type=Path, help="hardware cache (~/.cache/quantbench)")
    parser.add_argument("--remeasure", action="store_true", help="ignore cached measurements")
    parser.add_argument("--measured", type=Path, help="JSON of measured points to compare")
    parser.add_argument(
        "--proxy",
        action="store_true",
        help="also time a plain HF generate loop (batch 1) as a proxy measurement",
    )
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")


def settings_from_args(args: argparse.Namespace) -> EstimateSettings:
    """The :class:`EstimateSettings` the command-line options describe."""
    return EstimateSettings(
        hardware=[args.hardware],
        workload=EstimateWorkload(
            input_len=args.input_len, output_len=args.output_len, concurrency=args.concurrency
        ),
        slo=SloSpec(ttft_ms=args.ttft_slo_ms, itl_ms=args.itl_slo_ms),
        efficiency=EfficiencyOverrides(
            compute=args.compute_efficiency,
            bandwidth=args.bandwidth_efficiency,
            step_overhead_ms=args.step_overhead_ms,
        ),
        engine=args.engine,
        kv_cache_dtype=args.kv_cache_dtype,
        memory_utilization=args.memory_utilization,
        measure=MeasureSettings(
            threads=args.threads, cache_dir=args.cache_dir, remeasure=args.remeasure
        ),
    )


def run_estimate(
    args: argparse.Namespace, variants: Mapping[str, EstimatedVariant] | None = None
) -> int:
    """Print the analysis (and comparison); write JSON if asked. Returns the exit code."""
    try:
        if args.proxy and args.hardware.lower() != "this":
            raise EstimateInputError(
                f"--proxy measures this machine; it cannot be compared with --hardware "
                f"{args.hardware}"
            )
        settings = settings_from_args(args)
        variant = parse_variant(args.variant, args.model, variants)
        points: list[MeasuredPoint] = []
        if args.measured is not None:
            points += [
                p
                for p in load_measured(args.measured)
                if p.variant == variant.name and p.hardware == args.hardware
            ]
        engines = sorted({p.engine for p in points} | ({PROXY_ENGINE} if args.proxy else set()))
        result, arch, weights, hardware = estimate_result(
            args.model, variant, args.hardware, settings, extra_engines=engines
        )
    except (ValueError, ValidationError, FileNotFoundError) as error:
        print(f"quantbench estimate: {error}", file=sys.stderr)
        return 2
    print(render(result))

    if args.proxy:
        # Same thread count as the hardware figures, so the two describe the same machine.
        threads = hardware.measurement.threads if hardware.measurement else settings.measure.threads
        points.append(
            measure_hf_generate(
                args.model,
                variant=variant.name,
                input_len=args.input_len,
                output_len=args.output_len,
                threads=threads or 1,
            )
        )
    out = result.model_dump(mode="json")
    if points:
        out["comparison"] = comparison(arch, weights, hardware, settings, points, variant)
        print()
        print(render_comparison(out["comparison"]))
    if args.json is not None:
        write_json(args.json, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``estimate`` on its own (``python -m quantbench.cli.estimate``)."""
    parser = argparse.ArgumentParser(prog="quantbench estimate", description=__doc__)
    add_estimate_arguments(parser)
    return run_estimate(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
