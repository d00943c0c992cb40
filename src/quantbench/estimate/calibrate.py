"""This machine's figures for the estimator, measured once per machine and model: the
`calibrate` stage.

The estimate for ``hardware: this`` needs what only measuring can give: copy and read bandwidth,
matrix-vector rates at the model's own matrix shapes in every probed dtype, dense matmul rates
and the transformers engine's per-step and per-layer overheads. Measured here, they become a
stage output DVC tracks (``reports/calibrate/this.json``): the estimate depends on that file, and
the file depends on the machine's fingerprint (``reports/env.json``), the model's shapes and the
measure settings, so a new machine, model or thread count measures again and nothing else does.
(Before, the estimate read a cache in ``~/.cache/quantbench`` that DVC did not know.)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from quantbench.estimate import machine
from quantbench.estimate.arch import read_architecture
from quantbench.estimate.engines import add_engine_overhead
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.machine import PROBED_GEMV_DTYPES, add_shape_probes
from quantbench.schemas.hardware import HardwareSpec, shape_key
from quantbench.schemas.step_fit import StepFit

log = logging.getLogger(__name__)


def measured_engines() -> list[str]:
    """Engines whose overheads a calibration measures (``Engine.overhead_probe``)."""
    from quantbench.engines.registry import all_engines

    return [name for name, engine in all_engines().items() if engine.overhead_probe]


def calibrate(
    model_dir: Path, threads: int | None = None, dtypes: Sequence[str] = PROBED_GEMV_DTYPES
) -> HardwareSpec:
    """Measure this machine for the model in ``model_dir`` (about half a minute on 2 cores)."""
    arch = read_architecture(model_dir)
    spec = machine.measure_machine(threads)
    shapes = sorted(arch.streamed_shape_shares())
    for dtype in dtypes:
        spec = add_shape_probes(spec, dtype, shapes)
    for engine in measured_engines():
        spec = add_engine_overhead(spec, engine)
    return spec


def lacking(spec: HardwareSpec, model_dir: Path) -> list[str]:
    """What a calibration lacks for this model: shape probes or engine overheads (empty: none)."""
    measurement = spec.measurement
    if measurement is None:
        return ["a measurement (it is a datasheet entry, not a calibration)"]
    shapes = {shape_key(r, c) for r, c in read_architecture(model_dir).streamed_shape_shares()}
    missing = [
        f"{dtype} probes at the model's shapes"
        for dtype in PROBED_GEMV_DTYPES
        if not shapes <= set(measurement.gemv_shape_gbs.get(dtype, {}))
    ]
    missing += [
        f"the {engine} overhead"
        for engine in measured_engines()
        if engine not in measurement.engine_overheads
    ]
    return missing


def check_calibration(
    spec: HardwareSpec, model_dir: Path, threads: int | None, where: str
) -> HardwareSpec:
    """``spec`` if it is a whole calibration of this machine for this model, at the thread count
    asked; otherwise an error that says what differs and what to rerun."""
    rerun = f"rerun `dvc repro calibrate` (or delete {where})"
    missing = lacking(spec, model_dir)
    if missing:
        raise EstimateInputError(f"{where} lacks {'; '.join(missing)}: {rerun}")
    measurement = spec.measurement
    assert measurement is not None
    here = machine.cpu_model()
    if measurement.cpu_model != here:
        raise EstimateInputError(
            f"{where} was measured on {measurement.cpu_model!r}, this machine is {here!r}: {rerun}"
        )
    wanted = threads or len(os.sched_getaffinity(0))
    if measurement.threads != wanted:
        raise EstimateInputError(
            f"{where} was measured with {measurement.threads} threads, estimate.measure asks "
            f"for {wanted}: {rerun}"
        )
    return spec


def read_pair_fits(bench_dir: Path, pairs: Iterable[str]) -> dict[str, StepFit]:
    """The fits of ``pairs`` that their bench stages probed (``<bench_dir>/<pair>/probe.json``),
    each checked to be of this machine; a pair without a file is left to the roofline."""
    from quantbench.schemas import io as schema_io
    from quantbench.schemas.machine import PairCalibration

    here = machine.cpu_model()
    fits: dict[str, StepFit] = {}
    for pair in pairs:
        path = bench_dir / pair / PairCalibration.FILE
        if not path.is_file():
            continue
        probed = schema_io.read(path, PairCalibration, pair=pair)
        if probed.cpu_model != here:
            raise EstimateInputError(
                f"{path} was probed on {probed.cpu_model!r}, this machine is {here!r}: rerun "
                f"`dvc repro bench@{pair}` (or delete {path})"
            )
        if probed.fit is None:
            why = probed.skipped or probed.error
            log.warning("%s: no probe (%s): predicted from the roofline", pair, why)
            continue
        fits[pair] = probed.fit
    return fits
