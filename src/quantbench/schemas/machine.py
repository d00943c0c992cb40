"""``reports/calibrate/this.json`` (stage ``calibrate``): this machine measured for the estimator;
``reports/bench/<pair>/probe.json`` (stage ``bench@<pair>``): each bench pair's server probed.

(The machine's calibration; the quantizers' calibration data is :mod:`quantbench.schemas.variant`'s.)

Written by ``stages/calibrate.py`` from :func:`quantbench.estimate.calibrate.calibrate`: the
measured :class:`~quantbench.schemas.hardware.HardwareSpec` (on a CPU its ``measurement`` holds
every probe, the thread count, the CPU model and the torch version; on a GPU its ``gpu``, the
GPU's probes and their ratios to the datasheet), the datasheet entry the GPU matched, and what it
was measured for.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, stamp, version
from quantbench.schemas.hardware import HardwareSpec
from quantbench.schemas.step_fit import ProbeRequest, StepFit


class MachineCalibration(StageOutput):
    """This machine's figures for ``estimate.hardware: this``."""

    OUTPUT: ClassVar[str] = "reports/calibrate/this.json"
    STAGE: ClassVar[str] = "calibrate"
    # version 2 adds ``device`` and ``datasheet`` (a GPU measured); every version-1 file is a CPU's
    MIGRATIONS: ClassVar[Migrations] = {1: stamp(2)}

    schema_version: Literal[2] = version(2)
    hardware: HardwareSpec = Field(description="The measured machine, every probe included.")
    model: str = Field(description="The model folder whose matrix shapes were probed.")
    device: Literal["cpu", "cuda"] = Field(
        "cpu", description="What was measured: the CPU, or the GPU (runtime.device resolved)."
    )
    datasheet: HardwareSpec | None = Field(
        None,
        description="On a GPU: the datasheet entry its name matched (quantbench.estimate."
        "hardware), which the measurement's ratios are taken against; None: a CPU, or a GPU the "
        "table does not hold (estimated from its calibration alone).",
    )


class PairCalibration(StageOutput):
    """One bench pair's real server probed on this machine: what its requests and steps cost
    (``quantbench.estimate.step_fit``), for the estimate's predictions of that pair."""

    OUTPUT: ClassVar[str] = "reports/bench/{pair}/probe.json"
    STAGE: ClassVar[str] = "bench@{pair}"
    FILE: ClassVar[str] = "probe.json"
    """Its name in the pair's bench folder."""
    # version 2 adds ``skipped`` (a pair not probed by choice); every version-1 file was probed.
    # Version 3: the bench stage probes its own server (the calibrate_pair stage started one of
    # its own), so ``seconds`` no longer holds a server start; the fields are the same.
    # Version 4 adds ``gpu`` (the probe of a server on a GPU); every earlier file was a CPU's.
    MIGRATIONS: ClassVar[Migrations] = {1: stamp(2), 2: stamp(3), 3: stamp(4)}

    schema_version: Literal[4] = version(4)
    pair: str
    variant: str
    engine: str
    server_point: str = Field(description="the setting probed (the sweep's largest batch)")
    settings: dict[str, Any] = Field(description="the engine settings the server ran with")
    command: list[str] = Field(description="the server's command line, secrets redacted")
    cpu_model: str
    gpu: str | None = Field(
        None, description="the GPU the server computed on, as its driver names it (None: the CPU)"
    )
    measured_at: str
    seconds: float = Field(
        description="the probe's wall time on the bench's started server (versions 1-2: its "
        "own server's start included)"
    )
    requests: list[ProbeRequest] = Field(description="every measured request of the probe")
    fit: StepFit | None = Field(
        description="None: the probe failed (``error``) or was not run (``skipped``)"
    )
    error: str | None = Field(
        None,
        description="why the server could not be probed; the estimate then predicts the "
        "pair from the roofline alone",
    )
    skipped: str | None = Field(
        None,
        description="why the pair was not probed, by choice (``bench.pairs.<pair>.probe: "
        "false``) or because every point of its probed setting was resumed; the estimate predicts it from the roofline alone, and says so",
    )


__all__ = ["MachineCalibration", "PairCalibration"]
