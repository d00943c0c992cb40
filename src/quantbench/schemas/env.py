"""``reports/env.json`` (stage ``fingerprint``): the environment a measurement was taken in.

Written by ``stages/fingerprint.py`` from :func:`quantbench.fingerprint.fingerprint`: machine,
accelerators, library versions (the project's and each engine environment's), the pinned
llama.cpp, and which native kernels each part picks on this CPU (``kernels``, the engines'
entries as each engine reports them). Only stable facts, so an unchanged machine writes a
byte-identical file and no benchmark reruns.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version


class CpuInfo(Strict):
    model: str
    logical_cores: int | None
    flags: list[str] = Field(description="The instruction-set flags of interest /proc shows.")


class GpuInfo(Strict):
    """One NVIDIA GPU as NVML (or nvidia-smi) names it (quantbench.accelerator)."""

    index: int
    name: str = Field(description="e.g. 'NVIDIA H100 80GB HBM3'.")
    memory_mib: int = Field(description="Its memory, MiB.")
    compute_capability: str | None = Field(description="e.g. '9.0'; None: the driver says none.")


class AcceleratorInfo(Strict):
    """What the one probe of the machine found, and where the pipeline computes."""

    source: Literal["nvml", "nvidia-smi", "none"] = Field(description="Which answered.")
    driver: str | None = Field(description="The NVIDIA driver's version.")
    cuda: str | None = Field(description="The highest CUDA version the driver supports.")
    device: Literal["cpu", "cuda"] = Field(description="runtime.device, resolved here.")
    stack: Literal["cpu", "cuda"] | None = Field(
        description="The software stack `make setup` installed (.venv/stack.json; None: not "
        "recorded, an environment made before setup chose stacks)."
    )
    stack_reason: str | None = Field(description="Why setup chose it, as it printed.")


class LlamaCppRelease(Strict):
    release: str = Field(description="The pinned source release (pip requirement).")
    cmake_flags: list[str] = Field(description="The project's fixed cmake flags.")


class LlamaCppKernels(Strict):
    """The llama.cpp build: whether it fits this machine, and the ISA probe's verdicts."""

    build_fits_this_machine: bool
    cmake_flags: list[str] | None
    isa_kept: list[str] | None
    isa_dropped: list[str] | None
    isa_outcomes: dict[str, str] | None
    march: str | None


class TorchKernels(Strict):
    """What torch in one environment dispatches to on this CPU."""

    OMIT_WHEN_NONE = frozenset({"library", "attention_bf16"})

    torch: str = Field(description="torch's version in that environment.")
    capability: str = Field(description="torch.backends.cpu.get_cpu_capability().")
    avx512: bool | None
    avx512_bf16: bool | None
    amx_tile: bool | None
    amx_fp16: bool | None
    mkldnn: bool
    onednn_isa: str | None = Field(description="The ISA oneDNN named for a bf16 matmul.")
    library: str | None = Field(None, description="vLLM only: its native library.")
    attention_bf16: str | None = Field(None, description="vLLM only: its bf16 attention kernels.")


class Kernels(Strict):
    """Which kernels each native part picks on this CPU: the project's torch, found by the
    fingerprint, and each engine's own, as the engine reports them (``Engine.kernels``: the
    llama.cpp engine its build, the vLLM engine its environment's torch). The engines' entries
    are this file's fields, so a new one is a new field (and a schema version)."""

    llama_cpp: LlamaCppKernels = Field(description="The llama.cpp engine's (its pinned build).")
    torch: TorchKernels | None = Field(description="The project's environment (None: no torch).")
    vllm: TorchKernels | None = Field(
        description="The vLLM engine's environment (None: not installed, or the engine is off)."
    )
    warnings: list[str] = Field(description="Parts that would use an ISA the probe saw fault.")


def _engine_envs(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2: vLLM's environment is one engine environment among others (``vllm_env`` ->
    ``engine_envs.vllm``; none recorded -> no entry)."""
    out = {k: v for k, v in data.items() if k != "vllm_env"}
    vllm = data.get("vllm_env")
    out["engine_envs"] = {} if vllm is None else {"vllm": vllm}
    out["schema_version"] = 2
    return out


def _accelerator(data: dict[str, Any]) -> dict[str, Any]:
    """Version 3: each GPU's memory in MiB and its compute capability (nvidia-smi's text before),
    what found them and the device in ``accelerator``."""
    out = dict(data)
    old = data.get("gpus") or []
    out["gpus"] = [
        {
            "index": i,
            "name": g["name"],
            "memory_mib": int("".join(c for c in str(g.get("memory", "")) if c.isdigit()) or 0),
            "compute_capability": None,
        }
        for i, g in enumerate(old)
    ]
    out["accelerator"] = {
        "source": "nvidia-smi" if old else "none",
        "driver": old[0].get("driver") if old else None,
        "cuda": None,
        "device": "cuda" if old else "cpu",
        "stack": None,
        "stack_reason": None,
    }
    out["schema_version"] = 3
    return out


class EnvInfo(StageOutput):
    """Machine, accelerators, libraries and kernels."""

    OUTPUT: ClassVar[str] = "reports/env.json"
    STAGE: ClassVar[str] = "fingerprint"
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1), 1: _engine_envs, 2: _accelerator}

    schema_version: Literal[3] = version(3)
    python: str
    os: str
    machine: str
    cpu: CpuInfo
    memory_gib: float | None
    gpus: list[GpuInfo]
    accelerator: AcceleratorInfo
    packages: dict[str, str | None] = Field(description="Distribution -> version (None: absent).")
    engine_envs: dict[str, dict[str, str | None] | None] = Field(
        description="Each enabled engine with an environment of its own (its interpreter apart "
        "from quantbench's: vLLM's venv, a plugin's): distribution -> version there (None: the "
        "environment does not exist)."
    )
    llama_cpp: LlamaCppRelease
    kernels: Kernels


__all__ = [
    "AcceleratorInfo",
    "CpuInfo",
    "EnvInfo",
    "GpuInfo",
    "Kernels",
    "LlamaCppKernels",
    "LlamaCppRelease",
    "TorchKernels",
]
