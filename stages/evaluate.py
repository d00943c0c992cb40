"""DVC stage `evaluate@<name>`: measure one variant against the merged model.

Writes reports/quality/<name>.json: perplexity, KL divergence from the merged model (mean and a
high percentile), top-1 agreement, held-out accuracy, size on disk, peak memory, wall times
(the quantize stage's too, when its timing report is there).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.data import DataSettings, check_data_file
from quantbench.errors import run_main
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.quality import evaluate_variant
from quantbench.quality.spec import EvaluateSettings
from quantbench.runtime import RuntimeSettings, configure_device
from quantbench.schemas import io as schema_io
from quantbench.schemas.quantize import QuantizeTiming


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True, help="variant name (a key of `variants:`)")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--variant", type=Path, default=None, help="default: models/variants/<name>"
    )
    parser.add_argument("--reference", type=Path, default=Path("models/merged"))
    parser.add_argument("--eval-text", type=Path, default=None, help="default: data.eval")
    parser.add_argument("--heldout", type=Path, default=None, help="default: data.heldout")
    parser.add_argument(
        "--quantize-report", type=Path, default=None, help="default: reports/quantize/<name>.json"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: reports/quality/<name>.json"
    )
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    data = section(params, "data", DataSettings)
    runtime = section(params, "runtime", RuntimeSettings)
    # the threads are the worker's to set (it configures torch in its own process); the device
    # is resolved here, once, and handed to both passes (and to the worker's environment)
    device = configure_device(runtime.device)
    report = evaluate_variant(
        args.name,
        args.variant or Path("models/variants") / args.name,
        args.reference,
        check_data_file(args.eval_text or data.eval, "data.eval"),
        check_data_file(args.heldout or data.heldout, "data.heldout"),
        section(params, "evaluate", EvaluateSettings),
        threads=runtime.threads,
        device=device,
    )
    timing_path = args.quantize_report or Path("reports/quantize") / f"{args.name}.json"
    if timing_path.is_file():
        report.quantize = schema_io.read(timing_path, QuantizeTiming, name=args.name)
    out = args.out or Path("reports/quality") / f"{args.name}.json"
    schema_io.write(out, report)
    print(
        f"evaluate@{args.name}: ppl {report.perplexity:.3f} "
        f"(x{report.perplexity_ratio:.3f} of merged), KL mean {report.kl_divergence.mean:.4f}, "
        f"top-1 {report.top1_agreement:.1%}, held-out {report.heldout_accuracy:.0%}, "
        f"peak RSS {report.memory.peak_rss_bytes / 2**20:.0f} MiB "
        f"in {report.timings.total_s:.0f} s -> {out}"
    )


if __name__ == "__main__":
    run_main(main)
