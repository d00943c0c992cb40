"""DVC stage `quantize@<name>`: build one variant of the merged model into models/variants/<name>.

The recipe is `variants.<name>` in params.yaml. The variant folder (weights + variant.json) is
byte-identical across runs on the same inputs; the wall times go to a separate small report
(`--timing-out`), which `evaluate@<name>` copies into the quality report.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.data import DataSettings
from quantbench.errors import run_main
from quantbench.formats.registry import variant_recipe
from quantbench.fsutil import atomic_dir
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.quantize import build_variant
from quantbench.runtime import RuntimeSettings, configure_device, configure_threads
from quantbench.schemas import io as schema_io
from quantbench.schemas.quantize import QuantizeTiming


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True, help="variant name (a key of `variants:`)")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--merged", type=Path, default=Path("models/merged"))
    parser.add_argument("--calibration", type=Path, default=None, help="default: data.calibration")
    parser.add_argument("--out", type=Path, default=None, help="default: models/variants/<name>")
    parser.add_argument(
        "--timing-out", type=Path, default=None, help="default: reports/quantize/<name>.json"
    )
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    spec = variant_recipe(params, args.name, args.params)
    runtime = section(params, "runtime", RuntimeSettings)
    threads = runtime.threads
    data = section(params, "data", DataSettings)
    configure_threads(threads)
    device = configure_device(runtime.device)
    out = args.out or Path("models/variants") / args.name
    with atomic_dir(out) as tmp:
        info = build_variant(
            args.name,
            spec,
            args.merged,
            tmp,
            args.calibration or data.calibration,
            threads,
            device=device,
        )
    timing = QuantizeTiming(
        name=args.name,
        format=info.format,
        threads=threads,
        size_bytes=info.size_bytes,
        quantize_s=info.timings["quantize_s"],
        describe_s=info.timings["describe_s"],
    )
    schema_io.write(args.timing_out or Path("reports/quantize") / f"{args.name}.json", timing)
    print(
        f"quantize@{args.name}: {info.format} -> {out} "
        f"({info.size_bytes / 2**20:.1f} MiB) in {info.timings['quantize_s']:.1f} s"
    )


if __name__ == "__main__":
    run_main(main)
