"""``reports/calibrate/this.json`` (stage ``calibrate``): this machine measured for the estimator.

(The machine's calibration; the quantizers' calibration data is :mod:`quantbench.schemas.variant`'s.)

Written by ``stages/calibrate.py`` from :func:`quantbench.estimate.calibrate.calibrate`: the
measured :class:`~quantbench.estimate.hardware.HardwareSpec` (its ``measurement`` holds every
probe, the thread count, the CPU model and the torch version), and what it was measured for.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from quantbench.estimate.hardware import HardwareSpec
from quantbench.schemas.base import Migrations, StageOutput, version


class MachineCalibration(StageOutput):
    """This machine's figures for ``estimate.hardware: this``."""

    OUTPUT: ClassVar[str] = "reports/calibrate/this.json"
    STAGE: ClassVar[str] = "calibrate"
    MIGRATIONS: ClassVar[Migrations] = {}

    schema_version: Literal[1] = version(1)
    hardware: HardwareSpec = Field(description="The measured machine, every probe included.")
    model: str = Field(description="The model folder whose matrix shapes were probed.")


__all__ = ["MachineCalibration"]
