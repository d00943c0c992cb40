"""The device an engine's server computes on: its ``device`` setting resolved through the one probe
of the machine (:func:`quantbench.accelerator.resolve_device`).

``auto`` is the GPU where one is found, else the CPU; it follows ``runtime.device`` through
``QUANTBENCH_DEVICE`` (``cpu`` there hides the GPUs). No engine looks for a GPU itself.
"""

from __future__ import annotations

from typing import Literal

from quantbench.accelerator import Gpu, detect, resolve_device
from quantbench.accelerator.nvidia import Device, NoGpuError
from quantbench.errors import UserError

DeviceSetting = Literal["auto", "cpu", "cuda"]
DEVICE_HELP = (
    "Where the server computes: auto, the GPU where quantbench.accelerator finds one (it "
    "follows runtime.device), else the CPU; cpu; cuda (refused without a GPU)."
)


def _base(requested: str) -> str:
    """``cuda:N`` asks for a GPU as ``cuda`` does."""
    return "cuda" if requested.startswith("cuda") else requested


def intended_device(requested: str) -> Device:
    """What the setting asks for, without refusing anything: ``cuda`` (or ``cuda:N``) as asked,
    ``auto`` resolved here. For what is only described (the environment to create, what the
    estimator counts), where a machine without the GPU asked for is not yet an error."""
    base = _base(requested)
    return "cuda" if base == "cuda" else resolve_device(base)


def device_problem(engine: str, requested: str) -> str | None:
    """Why ``engines.<engine>.device`` cannot be served on this machine (cuda without a GPU, a
    GPU index beyond those found), or None."""
    try:
        resolve_device(_base(requested))
    except NoGpuError:
        return (
            f"engines.{engine}.device: {requested}, but this machine has {detect().describe()}: "
            f"set engines.{engine}.device: auto (or cpu), or serve on a machine with an NVIDIA GPU"
        )
    if requested.startswith("cuda:"):
        index, count = int(requested.split(":", 1)[1]), len(detect().gpus)
        if index >= count:
            return (
                f"engines.{engine}.device: {requested}, but this machine has {count} GPU"
                f"{'s' if count != 1 else ''} ({detect().describe()}): give cuda:0 to "
                f"cuda:{count - 1}, or auto"
            )
    return None


def serving_device(engine: str, requested: str) -> Device:
    """Where ``engines.<engine>.device`` serves on this machine; a UserError naming the setting
    where it cannot (the launch's check)."""
    problem = device_problem(engine, requested)
    if problem is not None:
        raise UserError(problem)
    return resolve_device(_base(requested))


def gpus() -> tuple[Gpu, ...]:
    """The GPUs found (none where the device is the CPU: ``QUANTBENCH_DEVICE=cpu`` hides them)."""
    return detect().gpus
