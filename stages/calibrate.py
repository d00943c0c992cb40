"""DVC stage `calibrate`: measure this machine for the estimator (reports/calibrate/this.json).

Measures what `runtime.device` resolves to: the CPU, or the GPU (its datasheet entry recorded
beside it). Runs when the machine (reports/env.json), the model's shapes, `runtime.device` or
`estimate.measure` change; the `estimate` stage reads its output for `hardware: this` instead of
measuring on its own.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from quantbench.errors import run_main
from quantbench.estimate.calibrate import calibrate, calibration_record
from quantbench.estimate.spec import MeasureSettings
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.runtime import RuntimeSettings, configure_device
from quantbench.schemas import io as schema_io
from quantbench.schemas.machine import MachineCalibration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", type=Path, default=Path("models/base"))
    parser.add_argument("--out", type=Path, default=Path(MachineCalibration.OUTPUT))
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    measure = section(params, "estimate.measure", MeasureSettings)
    device = configure_device(section(params, "runtime", RuntimeSettings).device)
    started = time.monotonic()
    spec = calibrate(args.model, measure.threads, device=device)
    schema_io.write(args.out, calibration_record(spec, args.model))
    took = f"({time.monotonic() - started:.0f} s)"
    if spec.gpu is not None:
        from quantbench.estimate.gpu import describe

        print(f"calibrate: {describe(spec.gpu)}, {len(spec.gpu.gemm_shape_tflops.get('bf16', {}))} "
              f"shape products {took}")  # fmt: skip
        return
    m = spec.measurement
    assert m is not None
    print(
        f"calibrate: {m.cpu_model}, {m.threads} threads: copy {m.copy_gbs:.1f} GB/s, "
        f"{sum(len(v) for v in m.gemv_shape_gbs.values())} shape probes, "
        f"engine overheads: {', '.join(m.engine_overheads) or 'none'} {took}"
    )


if __name__ == "__main__":
    run_main(main)
