"""The machine's accelerators: NVIDIA GPUs found once (NVML, else ``nvidia-smi``), the device a
setting resolves to, and what a GPU's counters say while a server runs.

The one place that asks the machine whether it has a GPU: everything else (setup's stack, the
stages' torch device, each engine's flags, the fingerprint, the estimate) follows from
:func:`detect`. Standard library only at import: setup runs it on the machine's own Python before
any environment exists (``python -m quantbench.accelerator``).
"""

from quantbench.accelerator.nvidia import (
    DEVICE_ENV,
    DEVICES,
    Accelerators,
    Gpu,
    detect,
    resolve_device,
    torch_device,
)

__all__ = [
    "DEVICES",
    "DEVICE_ENV",
    "Accelerators",
    "Gpu",
    "detect",
    "resolve_device",
    "torch_device",
]
