"""Process-level runtime settings: torch threads and determinism seeds.

Thread counts matter more than anything else on small CPU machines: on a 2-core box, torch's
default of 2 intra-op threads made generation 5-10x slower under load than 1 thread per process.
So threads are always an explicit setting, applied before torch does any work.
"""

from __future__ import annotations

import contextlib
import os
import random
from typing import Literal

from pydantic import Field

from quantbench.accelerator.nvidia import DEVICE_ENV, Device, NoGpuError, resolve_device
from quantbench.errors import UserError
from quantbench.settings import Settings

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class RuntimeSettings(Settings):
    threads: int = Field(
        1,
        ge=1,
        le=1024,
        description="torch intra-op threads of the offline stages (prepare, finetune, merge, "
        "quantize, evaluate). They run alone, so all cores help (2 made evaluation 26 % faster on "
        "2 cores); servers under load have their own engines.<engine>.threads.",
    )
    seed: int = Field(1234, ge=0, description="Seed for training, sampling and shuffling.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where every stage computes and every engine serves: auto, the first NVIDIA "
        "GPU where one is found (quantbench.accelerator: NVML, else nvidia-smi), else the CPU; "
        "cpu holds the whole pipeline on the CPU of a GPU machine; cuda refuses to run without "
        "a GPU. An engine's own `device` setting left at auto follows it.",
    )


def configure_device(requested: str) -> Device:
    """Resolve ``runtime.device`` once for this process and hand it on to every process it starts
    (``QUANTBENCH_DEVICE``: an engine's server, the evaluate worker): ``cpu`` hides the GPUs from
    :func:`quantbench.accelerator.nvidia`, so nothing later decides otherwise."""
    try:
        device = resolve_device(requested)
    except NoGpuError as exc:
        raise UserError(f"runtime.device: {exc}") from None
    os.environ[DEVICE_ENV] = device
    return device


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that pin a child process's BLAS/OpenMP thread pools."""
    return dict.fromkeys(THREAD_ENV_VARS, str(threads))


def configure_threads(threads: int) -> None:
    """Pin this process's torch intra-op threads (and the OpenMP pools of any child process)."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    os.environ.update(thread_env(threads))
    import torch

    torch.set_num_threads(threads)
    # Inter-op threads can only be set once per process, before any parallel work starts.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(threads)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators so training and sampling repeat exactly."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
