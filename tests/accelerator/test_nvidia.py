"""The GPUs found once: NVML's answer, nvidia-smi's recorded answer, none; the device a setting
resolves to; and that nothing else in the package asks the machine on its own."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from quantbench.accelerator import nvidia
from quantbench.accelerator.nvidia import (
    Accelerators,
    NoGpuError,
    detect,
    from_nvml,
    parse_nvidia_smi,
    probe,
    resolve_device,
    torch_device,
)
from quantbench.errors import UserError
from quantbench.runtime import configure_device

SRC = Path(__file__).resolve().parents[2] / "src" / "quantbench"


class RecordedNvml:
    """The calls quantbench makes of pynvml, answering as NVML 570 did on two H100 SXM."""

    def __init__(self, count: int = 2) -> None:
        self.count, self.calls = count, []

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.133.20"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"  # older bindings answer bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=85520809984, used=1 << 30)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"


def test_nvml_answer_becomes_the_record() -> None:
    nvml = RecordedNvml()
    found = from_nvml(nvml)
    assert found.source == "nvml" and found.driver == "570.133.20" and found.cuda == "12.8"
    assert [g.name for g in found.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert found.gpus[0].memory_mib == 81559 and found.gpus[1].sm == "90"
    assert nvml.calls == ["init", "shutdown"]  # NVML is left as found


def test_nvidia_smi_answer_becomes_the_same_record() -> None:
    query = "0, NVIDIA H100 80GB HBM3, 81559, 9.0, 570.133.20, GPU-a\n1, NVIDIA H100 80GB HBM3, 81559, [N/A], 570.133.20, GPU-b\n"
    header = "| NVIDIA-SMI 570.133.20   Driver Version: 570.133.20   CUDA Version: 12.8  |"
    found = parse_nvidia_smi(query, header)
    assert found.source == "nvidia-smi" and found.cuda == "12.8" and len(found.gpus) == 2
    assert found.gpus[0].compute_capability == "9.0"
    assert found.gpus[1].compute_capability is None  # an old driver without compute_cap
    assert parse_nvidia_smi("", header).source == "none"


def test_nvml_first_then_nvidia_smi_then_none() -> None:
    smi = Accelerators(
        gpus=parse_nvidia_smi("0, NVIDIA L4, 23034, 8.9, 570, u").gpus, source="nvidia-smi"
    )

    def no_library() -> object:
        raise ImportError("no pynvml")

    assert probe(nvml=RecordedNvml, smi=lambda: smi).source == "nvml"
    assert probe(nvml=no_library, smi=lambda: smi).gpus[0].name == "NVIDIA L4"

    def no_smi() -> Accelerators:
        raise FileNotFoundError

    found = probe(nvml=no_library, smi=no_smi)
    assert not found.has_gpu and found.notes == ("NVML: ImportError", "no nvidia-smi")
    assert "no NVIDIA GPU" in found.describe()


def test_the_stand_in_gpu_is_found_through_nvidia_smi(fake_gpu_factory) -> None:  # type: ignore[no-untyped-def]
    fake_gpu_factory("h200", count=2)
    found = detect()
    assert found.source == "nvidia-smi" and found.cuda == "12.8" and found.driver == "570.133.20"
    assert [(g.index, g.name, g.memory_mib, g.sm) for g in found.gpus] == [
        (0, "NVIDIA H200", 143771, "90"),
        (1, "NVIDIA H200", 143771, "90"),
    ]
    assert detect() is found  # probed once per process


def test_devices_resolve_from_what_was_found(fake_gpu, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert resolve_device("auto") == "cuda" and torch_device("cuda") == "cuda:0"
    assert resolve_device("cpu") == "cpu" and torch_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="expected one of auto, cpu, cuda"):
        resolve_device("gpu")
    # runtime.device: cpu hides the GPU from every later probe of this process and its children
    assert configure_device("cpu") == "cpu"
    assert not detect().has_gpu and resolve_device("auto") == "cpu"


def test_cuda_without_a_gpu_is_refused_naming_the_key(no_gpu) -> None:  # type: ignore[no-untyped-def]
    assert resolve_device("auto") == "cpu"
    with pytest.raises(NoGpuError):
        resolve_device("cuda")
    with pytest.raises(UserError, match=r"runtime.device: device cuda, but no NVIDIA GPU"):
        configure_device("cuda")


def test_nothing_else_asks_the_machine_for_a_gpu() -> None:
    """One probe (quantbench.accelerator): no module decides a device by its own look."""
    own = re.compile(
        r"""\[\s*["']nvidia-smi|which\(\s*["']nvidia-smi|["']/dev/nvidia|cuda\.is_available\("""
        r"""|cuda\.device_count\(|import pynvml"""
    )
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.parent.name == "accelerator":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if own.search(code):
                offenders.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_record_is_plain_data() -> None:
    found = parse_nvidia_smi("0, NVIDIA L4, 23034, 8.9, 570, u")
    assert found.as_dict()["gpus"][0] == {
        "index": 0, "name": "NVIDIA L4", "memory_mib": 23034, "compute_capability": "8.9", "uuid": "u",
    }  # fmt: skip
    assert nvidia.DEVICES == ("auto", "cpu", "cuda")
