"""DVC stage `estimate`: roofline estimates of every variant on the configured hardware.

Writes reports/estimate/estimates.json (full results and one summary row per variant x hardware).
Bytes are read from each variant's built files where they exist.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.errors import run_main
from quantbench.estimate.spec import EstimateSettings
from quantbench.estimate.stage import write_estimates
from quantbench.estimate.variants import variant_from_recipe
from quantbench.formats.registry import variant_recipe
from quantbench.params import read_params, section
from quantbench.progress import setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", type=Path, default=Path("models/base"))
    parser.add_argument("--variants", type=Path, default=Path("models/variants"))
    parser.add_argument("--out", type=Path, default=Path("reports/estimate/estimates.json"))
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    variants = {
        name: variant_from_recipe(name, variant_recipe(params, name), args.variants / name)
        for name in params.get("variants") or {}
    }
    write_estimates(args.model, variants, section(params, "estimate", EstimateSettings), args.out)


if __name__ == "__main__":
    run_main(main)
