"""A stand-in NVIDIA GPU on a CPU machine, for the tests of everything that follows from
:func:`quantbench.accelerator.nvidia`: the recorded ``nvidia-smi`` (tests/accelerator/recorded)
first on PATH, NVML unloadable (as where the binding finds no driver library), the probe's
once-per-process cache emptied before and after.

    def test_x(fake_gpu):            # one H100 SXM 80 GB, compute capability 9.0, CUDA 12.8
    def test_y(fake_gpu_factory):    # fake_gpu_factory("h200", count=2)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quantbench.accelerator import nvidia as detect_module

RECORDED = Path(__file__).resolve().parent / "accelerator" / "recorded"


def _no_nvml() -> object:
    raise ImportError("NVML held out: the stand-in GPU answers through nvidia-smi")


@pytest.fixture
def fake_gpu_factory(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    def make(gpu: str = "h100", count: int = 1) -> Path:
        monkeypatch.setenv("PATH", f"{RECORDED}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_SMI_GPU", gpu)
        monkeypatch.setenv("FAKE_SMI_COUNT", str(count))
        monkeypatch.delenv(detect_module.DEVICE_ENV, raising=False)
        monkeypatch.setattr(detect_module, "load_nvml", _no_nvml)
        detect_module._probed.cache_clear()
        return RECORDED / "nvidia-smi"

    yield make
    detect_module._probed.cache_clear()


@pytest.fixture
def fake_gpu(fake_gpu_factory: Callable[..., Path]) -> Path:
    return fake_gpu_factory()


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This machine as a CPU machine, whatever it has: the GPUs hidden (runtime.device: cpu)."""
    monkeypatch.setenv(detect_module.DEVICE_ENV, "cpu")
    detect_module._probed.cache_clear()
    yield
    detect_module._probed.cache_clear()
