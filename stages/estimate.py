"""DVC stage `estimate`: roofline estimates of every variant on the configured hardware.

Writes reports/estimate/estimates.json (full results and one summary row per variant x hardware).
Bytes are read from each variant's built files where they exist; `hardware: this` is the
`calibrate` stage's measurement (reports/calibrate/this.json), checked to be of this machine and
of the device `runtime.device` resolves to (the GPU where it is cuda).
The SLO and the workload are the pipeline's (`slo:`, `workloads:` as generated) unless
`estimate.slo` / `estimate.workload` say otherwise. With the calibration it also predicts every
bench pair, setting and closed-loop workload as the bench measures them (`pairs`), each pair
fitted to the probe its bench stage ran on its server (reports/bench/<pair>/probe.json).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.bench.served_here import served_pairs
from quantbench.config import load_config
from quantbench.errors import run_main
from quantbench.estimate.calibrate import check_calibration, read_pair_fits
from quantbench.estimate.hardware import THIS_MACHINE, this_gpu
from quantbench.estimate.pairs import bench_pairs, workload_shapes
from quantbench.estimate.pipeline import follow_pipeline
from quantbench.estimate.served import served_prompt_profiles
from quantbench.estimate.stage import write_estimates
from quantbench.estimate.variants import variant_from_recipe
from quantbench.progress import setup_logging
from quantbench.runtime import configure_device
from quantbench.schemas import io as schema_io
from quantbench.schemas.machine import MachineCalibration
from quantbench.workloads.traffic import Traffic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", type=Path, default=Path("models/base"))
    parser.add_argument("--variants", type=Path, default=Path("models/variants"))
    parser.add_argument("--calibration", type=Path, default=Path(MachineCalibration.OUTPUT))
    parser.add_argument("--workloads", type=Path, default=Path("reports/workloads"))
    parser.add_argument(
        "--bench",
        type=Path,
        default=Path("reports/bench"),
        help="the pairs' probes, in each "
        "bench stage's folder (<pair>/probe.json); a pair without one: the roofline alone",
    )
    parser.add_argument("--out", type=Path, default=Path("reports/estimate/estimates.json"))
    args = parser.parse_args()
    setup_logging()
    config = load_config(args.params)
    variants = {
        name: variant_from_recipe(name, recipe, args.variants / name)
        for name, recipe in config.variants.items()
    }
    workloads = config.workloads
    traffic = {name: Traffic.read(args.workloads, name) for name in workloads}
    summaries = {name: t.summary for name, t in traffic.items()}
    settings = follow_pipeline(  # slo: and workloads: unless estimate: sets its own
        config.estimate, config.slo, workloads, summaries
    )
    calibration = None
    fits = {}
    # the pairs that start a server here: a pair standing aside for its fallback has nothing to
    # predict on this machine (quantbench.bench.served_here)
    served, _ = served_pairs(config)
    if any(h.lower() == THIS_MACHINE for h in settings.hardware):
        # `this` is what the stages compute on: the GPU where runtime.device resolves to cuda
        gpu = this_gpu(configure_device(config.runtime.device))
        stored = schema_io.read(args.calibration, MachineCalibration)
        where = args.calibration.as_posix()
        calibration = check_calibration(
            stored.hardware, args.model, settings.measure.threads, where, gpu
        )
        fits = read_pair_fits(args.bench, served, gpu.name if gpu is not None else None)
    write_estimates(
        args.model, variants, settings, args.out, calibration=calibration,
        pairs=bench_pairs(served, config.pair_settings, fits),
        workloads=workload_shapes(
            workloads, summaries, prompts=served_prompt_profiles(args.model, workloads, traffic),
        ),
    )  # fmt: skip


if __name__ == "__main__":
    run_main(main)
