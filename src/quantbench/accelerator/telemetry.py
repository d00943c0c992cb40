"""What the GPUs' counters say while a server runs: memory per process, and utilization, memory
used, power and SM clock per device. NVML where it loads, ``nvidia-smi``'s CSV query where it
does not; nothing at all (no fork, no library) on a machine :func:`detect` found no GPU on.

The parsers take the answers (an NVML binding, the command's text), so recorded output tests
them on a CPU machine.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from quantbench.accelerator import nvidia as found

MIB = 2**20
SMI_DEVICE_FIELDS = ("index", "utilization.gpu", "memory.used", "power.draw", "clocks.sm")


@dataclass(frozen=True)
class DeviceSample:
    """One GPU at one instant."""

    index: int
    utilization_pct: float | None
    memory_used_mib: float | None
    power_w: float | None
    sm_clock_mhz: float | None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_process_memory(text: str, pids: Iterable[int]) -> int:
    """Bytes of GPU memory the ``pids`` hold, from ``nvidia-smi
    --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`` (MiB per line)."""
    wanted, total = set(pids), 0
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in wanted:
            used = _float(parts[1])
            total += int(used * MIB) if used is not None else 0
    return total


def parse_device_samples(text: str) -> list[DeviceSample]:
    """``nvidia-smi --query-gpu=<SMI_DEVICE_FIELDS> --format=csv,noheader,nounits``."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(SMI_DEVICE_FIELDS) or not parts[0].isdigit():
            continue
        util, mem, power, clock = (_float(p) for p in parts[1:])
        out.append(DeviceSample(int(parts[0]), util, mem, power, clock))
    return out


def nvml_process_memory(nvml: Any, pids: Iterable[int]) -> int:
    wanted, total = set(pids), 0
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            used = getattr(proc, "usedGpuMemory", None)
            if proc.pid in wanted and isinstance(used, int):
                total += used
    return total


def nvml_device_samples(nvml: Any) -> list[DeviceSample]:
    out = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)

        def read(call: Callable[[], Any]) -> Any:
            try:
                return call()
            except Exception:  # a counter this GPU or driver does not expose
                return None

        util = read(lambda h=handle: nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        mem = read(lambda h=handle: nvml.nvmlDeviceGetMemoryInfo(h).used / MIB)
        power = read(lambda h=handle: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)  # mW
        clock = read(lambda h=handle: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        out.append(
            DeviceSample(
                index=index,
                utilization_pct=None if util is None else float(util),
                memory_used_mib=None if mem is None else float(mem),
                power_w=None if power is None else float(power),
                sm_clock_mhz=None if clock is None else float(clock),
            )
        )
    return out


class Telemetry:
    """The counters, read through NVML (initialised once) or nvidia-smi; inert without a GPU."""

    def __init__(self, nvml: Callable[[], Any] | None = None) -> None:
        self.available = found.detect().has_gpu
        self._nvml: Any = None
        if not self.available:
            return
        try:
            binding = (nvml or found.load_nvml)()
            binding.nvmlInit()
            self._nvml = binding
        except Exception:  # NVML cannot start here: nvidia-smi answers instead
            self._nvml = None

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            finally:
                self._nvml = None

    def process_memory(self, pids: Iterable[int]) -> int | None:
        """GPU bytes the ``pids`` hold; None where there is no GPU (or nothing answered)."""
        if not self.available:
            return None
        pids = list(pids)
        try:
            if self._nvml is not None:
                return nvml_process_memory(self._nvml, pids)
            text = found.run_nvidia_smi(
                "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"
            )
        except (OSError, subprocess.SubprocessError):
            return None
        except Exception:  # an NVML error mid-run: the sample is missing, not the run
            return None
        return parse_process_memory(text, pids)

    def devices(self) -> list[DeviceSample]:
        """Every GPU's counters now ([] where there is no GPU)."""
        if not self.available:
            return []
        try:
            if self._nvml is not None:
                return nvml_device_samples(self._nvml)
            text = found.run_nvidia_smi(
                f"--query-gpu={','.join(SMI_DEVICE_FIELDS)}", "--format=csv,noheader,nounits"
            )
        except Exception:
            return []
        return parse_device_samples(text)
