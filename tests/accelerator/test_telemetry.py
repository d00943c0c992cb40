"""GPU counters and per-process memory from recorded answers; nothing asked on a CPU machine."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

from quantbench.accelerator.telemetry import (
    DeviceSample,
    Telemetry,
    nvml_device_samples,
    nvml_process_memory,
    parse_device_samples,
    parse_process_memory,
)


def test_nvidia_smi_counters_parse() -> None:
    text = "0, 87, 61234, 612.45, 1980\n1, [N/A], 10, [Not Supported], 1410\n"
    assert parse_device_samples(text) == [
        DeviceSample(0, 87.0, 61234.0, 612.45, 1980.0),
        DeviceSample(1, None, 10.0, None, 1410.0),
    ]
    apps = "4242, 60876\n17, 100\n4243, 12\n"
    assert parse_process_memory(apps, {4242, 4243}) == (60876 + 12) * 2**20


class RecordedNvml:
    NVML_CLOCK_SM = 1

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=10, usedGpuMemory=3 << 30),
            SimpleNamespace(pid=11, usedGpuMemory=None),
        ]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=55, memory=20)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(used=2 << 30, total=80 << 30)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 350500  # mW

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        raise RuntimeError("not supported")  # a counter the GPU does not expose


def test_nvml_counters_read_and_a_missing_one_is_none() -> None:
    nvml = RecordedNvml()
    assert nvml_process_memory(nvml, {10, 11}) == 3 << 30  # a process without a figure: none
    assert nvml_device_samples(nvml) == [DeviceSample(0, 55.0, 2048.0, 350.5, None)]


def test_the_stand_in_gpus_counters(fake_gpu, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FAKE_SMI_PID", str(os.getpid()))
    telemetry = Telemetry()
    assert telemetry.available
    assert telemetry.devices() == [DeviceSample(0, 87.0, 61234.0, 612.45, 1980.0)]
    assert telemetry.process_memory([os.getpid()]) == 60876 * 2**20
    assert telemetry.process_memory([1]) == 0


def test_a_cpu_machine_is_asked_nothing(no_gpu, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def forbidden(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError(f"forked {args}")

    monkeypatch.setattr(subprocess, "run", forbidden)
    telemetry = Telemetry()
    assert not telemetry.available
    assert telemetry.devices() == [] and telemetry.process_memory([os.getpid()]) is None
