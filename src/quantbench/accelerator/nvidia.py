"""NVIDIA GPUs found once, as a recorded fact: NVML first (``nvidia-ml-py``), ``nvidia-smi``
where NVML cannot be loaded, none where neither answers.

NVML is the library ``nvidia-smi`` itself reads; its Python binding is pinned in
requirements.txt, but setup runs before any environment exists and a container may ship the
command without the library, so ``nvidia-smi``'s CSV query is the fallback. Both are parsed by
functions that take their answers (a module with NVML's calls, the command's text), so a
recorded answer tests detection on a machine without a GPU.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Device = Literal["cpu", "cuda"]
DEVICES = ("auto", "cpu", "cuda")

# nvidia-smi's query, in this order; `compute_cap` needs a driver of 510 or newer (2022)
SMI_FIELDS = ("index", "name", "memory.total", "compute_cap", "driver_version", "uuid")
SMI_TIMEOUT_S = 15
_CUDA_IN_HEADER = re.compile(r"CUDA Version:\s*([0-9.]+)")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int
    compute_capability: str | None  # "9.0"; None where the driver does not say
    uuid: str | None = None

    @property
    def sm(self) -> str | None:
        """The CUDA architecture number nvcc and cmake take (``90`` for 9.0)."""
        return self.compute_capability.replace(".", "") if self.compute_capability else None


@dataclass(frozen=True)
class Accelerators:
    """What was found: the GPUs, the driver and the CUDA version it supports, and how."""

    gpus: tuple[Gpu, ...] = ()
    driver: str | None = None
    cuda: str | None = None  # the highest CUDA runtime the driver supports
    source: Literal["nvml", "nvidia-smi", "none"] = "none"
    notes: tuple[str, ...] = field(default=())  # why a source gave nothing (for the record)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def describe(self) -> str:
        if not self.gpus:
            why = f" ({'; '.join(self.notes)})" if self.notes else ""
            return f"no NVIDIA GPU{why}"
        names = sorted({g.name for g in self.gpus})
        cc = sorted({g.compute_capability or "?" for g in self.gpus})
        return (
            f"{len(self.gpus)} x {', '.join(names)} (compute capability {', '.join(cc)}, "
            f"driver {self.driver or '?'}, CUDA {self.cuda or '?'}; from {self.source})"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def from_nvml(nvml: Any) -> Accelerators:
    """Read the GPUs through an NVML binding (``pynvml`` of nvidia-ml-py, or a recorded stand-in
    with the same calls). Raises what the binding raises where NVML cannot start."""
    nvml.nvmlInit()
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        try:
            version = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
            cuda: str | None = f"{version // 1000}.{version % 1000 // 10}"
        except Exception:  # an old driver without the call: the version is only a record
            cuda = None
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                Gpu(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20,
                    compute_capability=f"{major}.{minor}",
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                )
            )
    finally:
        nvml.nvmlShutdown()
    return Accelerators(gpus=tuple(gpus), driver=driver, cuda=cuda, source="nvml")


def parse_nvidia_smi(query: str, header: str = "") -> Accelerators:
    """Parse ``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`` (``query``)
    and the CUDA version from the banner of a plain ``nvidia-smi`` (``header``)."""
    gpus, drivers = [], set()
    for line in query.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        index, name, memory, cc, driver = parts[:5]
        uuid = parts[5] if len(parts) > 5 else None
        drivers.add(driver)
        gpus.append(
            Gpu(
                index=int(index),
                name=name,
                memory_mib=int(float(memory)) if _number(memory) else 0,
                compute_capability=cc if re.fullmatch(r"\d+\.\d+", cc) else None,
                uuid=uuid or None,
            )
        )
    found = _CUDA_IN_HEADER.search(header)
    return Accelerators(
        gpus=tuple(gpus),
        driver=sorted(drivers)[0] if drivers else None,
        cuda=found.group(1) if found else None,
        source="nvidia-smi" if gpus else "none",
    )


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def nvidia_smi() -> str | None:
    """The ``nvidia-smi`` on PATH (None: none)."""
    return shutil.which("nvidia-smi")


def run_nvidia_smi(*args: str) -> str:
    """What ``nvidia-smi`` prints for ``args`` (raises OSError or SubprocessError)."""
    smi = nvidia_smi()
    if smi is None:
        raise FileNotFoundError("nvidia-smi is not on PATH")
    return subprocess.run(
        [smi, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=True
    ).stdout


def _via_nvidia_smi() -> Accelerators:
    query = run_nvidia_smi(f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits")
    try:
        header = run_nvidia_smi()
    except (OSError, subprocess.SubprocessError):
        header = ""
    return parse_nvidia_smi(query, header)


def load_nvml() -> Any:
    """NVML's Python binding, or raise ImportError (not installed: setup's own Python)."""
    import pynvml  # nvidia-ml-py

    return pynvml


def probe(
    nvml: Callable[[], Any] | None = None, smi: Callable[[], Accelerators] | None = None
) -> Accelerators:
    """Ask NVML, then nvidia-smi; what each could not tell is kept in ``notes``."""
    notes = []
    try:
        found = from_nvml((nvml or load_nvml)())
        if found.gpus:
            return found
        notes.append("NVML lists no GPU")
    except Exception as exc:  # the library absent (a CPU machine) or its driver not loaded
        notes.append(f"NVML: {type(exc).__name__}")
    try:
        found = (smi or _via_nvidia_smi)()
        if found.gpus:
            return found
        notes.append("nvidia-smi lists no GPU")
    except FileNotFoundError:
        notes.append("no nvidia-smi")
    except (OSError, subprocess.SubprocessError) as exc:
        notes.append(f"nvidia-smi failed: {type(exc).__name__}")
    return Accelerators(notes=tuple(notes))


# The variable the resolved ``runtime.device`` is handed on in (``runtime.configure_device``):
# every process a stage starts (an engine's server, the evaluate worker) then follows it.
DEVICE_ENV = "QUANTBENCH_DEVICE"


@functools.cache
def _probed() -> Accelerators:
    return probe()


def detect() -> Accelerators:
    """This machine's accelerators, probed once per process; none where ``QUANTBENCH_DEVICE`` is
    ``cpu`` (``runtime.device: cpu`` on a GPU machine: the whole pipeline on the CPU)."""
    if os.environ.get(DEVICE_ENV) == "cpu":
        return Accelerators(notes=(f"{DEVICE_ENV}=cpu",))
    return _probed()


class NoGpuError(ValueError):
    """``cuda`` was asked for where no NVIDIA GPU answers."""


def resolve_device(requested: str = "auto", found: Accelerators | None = None) -> Device:
    """``auto``: the GPU where one is found, else the CPU; ``cpu`` and ``cuda`` as given (cuda
    without a GPU is refused, naming what the probe saw)."""
    if requested not in DEVICES:
        raise ValueError(f"device {requested!r}: expected one of {', '.join(DEVICES)}")
    if requested == "cpu":
        return "cpu"
    found = detect() if found is None else found
    if requested == "cuda" and not found.has_gpu:
        raise NoGpuError(
            f"device cuda, but {found.describe()}: set runtime.device: auto (or cpu), or run on "
            "a machine whose NVIDIA driver answers nvidia-smi"
        )
    return "cuda" if found.has_gpu else "cpu"


def torch_device(device: str) -> str:
    """The torch device string of a resolved device (the first GPU: one process, one GPU)."""
    return "cuda:0" if device == "cuda" else "cpu"
