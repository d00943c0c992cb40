"""This machine's figures for the estimator, measured once per machine and model: the
`calibrate` stage.

The estimate for ``hardware: this`` needs what only measuring can give. On a CPU: copy and read
bandwidth, matrix-vector rates at the model's own matrix shapes in every probed dtype, dense
matmul rates and the transformers engine's per-step and per-layer overheads. Where
``runtime.device`` resolves to cuda, the GPU instead (:mod:`quantbench.estimate.gpu`): its
device copy, its products (square, and at the model's shapes) and the datasheet entry its name
matched. Measured here, they become a stage output DVC tracks (``reports/calibrate/this.json``):
the estimate depends on that file, and the file depends on the machine's fingerprint
(``reports/env.json``), the model's shapes and the measure settings, so a new machine, model or
thread count measures again and nothing else does. (Before, the estimate read a cache in
``~/.cache/quantbench`` that DVC did not know.)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from quantbench.accelerator import detect
from quantbench.engines.registry import all_engines
from quantbench.estimate import gpu as estimate_gpu
from quantbench.estimate import machine
from quantbench.estimate.arch import read_architecture
from quantbench.estimate.engines import add_engine_overhead
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.hardware import table_entry
from quantbench.estimate.machine import PROBED_GEMV_DTYPES, add_shape_probes
from quantbench.schemas import io as schema_io
from quantbench.schemas.hardware import HardwareSpec, shape_key
from quantbench.schemas.machine import MachineCalibration, PairCalibration
from quantbench.schemas.step_fit import StepFit

if TYPE_CHECKING:
    from quantbench.accelerator import Gpu

log = logging.getLogger(__name__)


def measured_engines() -> list[str]:
    """Engines whose overheads a calibration measures (``Engine.overhead_probe``)."""
    return [name for name, engine in all_engines().items() if engine.overhead_probe]


def calibrate(
    model_dir: Path,
    threads: int | None = None,
    dtypes: Sequence[str] = PROBED_GEMV_DTYPES,
    device: str = "cpu",
) -> HardwareSpec:
    """Measure this machine for the model in ``model_dir``: its CPU (about half a minute on 2
    cores), or where ``device`` is cuda its GPU (seconds)."""
    arch = read_architecture(model_dir)
    if device == "cuda":
        return estimate_gpu.measure_gpu(arch, detect())
    spec = machine.measure_machine(threads)
    shapes = sorted(arch.streamed_shape_shares())
    for dtype in dtypes:
        spec = add_shape_probes(spec, dtype, shapes)
    for engine in measured_engines():
        spec = add_engine_overhead(spec, engine)
    return spec


def calibration_record(spec: HardwareSpec, model_dir: Path) -> MachineCalibration:
    """The calibrate stage's output: the measured spec, and a GPU's datasheet entry beside it."""
    entry = spec.gpu.datasheet if spec.gpu is not None else None
    return MachineCalibration(
        hardware=spec,
        model=model_dir.as_posix(),
        device="cuda" if spec.gpu is not None else "cpu",
        datasheet=table_entry(entry) if entry is not None else None,
    )


def lacking(spec: HardwareSpec, model_dir: Path) -> list[str]:
    """What a calibration lacks for this model: shape probes or engine overheads (empty: none)."""
    if spec.gpu is not None:  # a GPU's: its products at the model's shapes (no engine overheads)
        wanted = set(estimate_gpu.layer_shapes(read_architecture(model_dir)))
        probed = set(spec.gpu.gemm_shape_tflops.get("bf16", {}))
        return [] if wanted <= probed else ["bf16 products at the model's shapes"]
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
    spec: HardwareSpec,
    model_dir: Path,
    threads: int | None,
    where: str,
    gpu: Gpu | None = None,
) -> HardwareSpec:
    """``spec`` if it is a whole calibration of this machine for this model, of the device it
    computes on (``gpu``: the GPU, ``hardware.this_gpu``; None: the CPU), at the thread count
    asked; otherwise an error that says what differs and what to rerun."""
    rerun = f"rerun `dvc repro calibrate` (or delete {where})"
    missing = lacking(spec, model_dir)
    if missing:
        raise EstimateInputError(f"{where} lacks {'; '.join(missing)}: {rerun}")
    measured = spec.gpu.gpu if spec.gpu is not None else None
    if measured != (gpu.name if gpu is not None else None):
        was = f"the GPU {measured!r}" if measured else "this machine's CPU"
        now = f"the GPU {gpu.name!r}" if gpu is not None else "its CPU (runtime.device)"
        raise EstimateInputError(f"{where} measured {was}, the estimate computes on {now}: {rerun}")
    if spec.gpu is not None:
        return spec  # threads and the CPU's model are the CPU's calibration's to check
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


def read_pair_fits(
    bench_dir: Path, pairs: Iterable[str], gpu: str | None = None
) -> dict[str, StepFit]:
    """The fits of ``pairs`` that their bench stages probed (``<bench_dir>/<pair>/probe.json``),
    each checked to be of this machine and of the device it computes on (``gpu``: the GPU's
    name; None: the CPU); a pair without a file is left to the roofline."""
    here = machine.cpu_model()
    fits: dict[str, StepFit] = {}
    for pair in pairs:
        path = bench_dir / pair / PairCalibration.FILE
        if not path.is_file():
            continue
        probed = schema_io.read(path, PairCalibration, pair=pair)
        if probed.fit is None:  # nothing to use, whichever machine it was
            why = probed.skipped or probed.error
            log.warning("%s: no probe (%s): predicted from the roofline", pair, why)
            continue
        if probed.cpu_model != here or probed.gpu != gpu:
            was, now = (probed.gpu, gpu) if probed.gpu != gpu else (probed.cpu_model, here)
            raise EstimateInputError(
                f"{path} was probed on {was or 'the CPU'!r}, this machine computes on "
                f"{now or 'its CPU'!r}: rerun `dvc repro bench@{pair}` (or delete {path})"
            )
        fits[pair] = probed.fit
    return fits
