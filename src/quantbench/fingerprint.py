"""The environment a measurement was taken in: machine, accelerator, libraries, thread settings.

Every bench stage depends on the file this writes, so a changed machine or library version makes
old measurements stale instead of silently mixing with new ones. Only stable facts go in (no clock
speeds, load averages or timestamps), so an unchanged machine writes a byte-identical file.
Its schema is :class:`quantbench.schemas.env.EnvInfo`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from quantbench.accelerator import detect
from quantbench.native import llama_build
from quantbench.native.isa import advertised_cpu
from quantbench.schemas.env import (
    AcceleratorInfo,
    CpuInfo,
    EnvInfo,
    GpuInfo,
    Kernels,
    LlamaCppRelease,
    TorchKernels,
)

PACKAGES = (
    "torch", "transformers", "peft", "accelerate", "safetensors", "tokenizers", "gguf",
    "gptqmodel", "llmcompressor", "compressed-tensors", "optimum", "locust", "gevent", "dvc",
    "fastapi", "uvicorn", "numpy", "nvidia-ml-py",
)  # fmt: skip
CPU_FLAGS = (
    "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
    "amx_bf16", "fma",
)  # fmt: skip


def cpu_info() -> CpuInfo:
    """The CPU as ``/proc/cpuinfo`` advertises it (quantbench.native.isa reads it)."""
    cpu = advertised_cpu()
    return CpuInfo(
        model=cpu.model if cpu.model is not None else platform.processor() or "unknown",
        logical_cores=os.cpu_count(),
        flags=[f for f in CPU_FLAGS if f in cpu.flags],
    )


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def gpus() -> list[GpuInfo]:
    """The NVIDIA GPUs the machine's one probe found (quantbench.accelerator)."""
    return [
        GpuInfo(
            index=g.index,
            name=g.name,
            memory_mib=g.memory_mib,
            compute_capability=g.compute_capability,
        )
        for g in detect().gpus
    ]


# what `make setup` recorded of the stack it chose (quantbench.native.stack --write)
STACK_FILE = Path(".venv/stack.json")


def accelerator(device: str = "auto", stack_file: Path = STACK_FILE) -> AcceleratorInfo:
    """What was found, the device ``runtime.device`` resolves to, and the stack setup chose."""
    found = detect()
    try:
        stack = json.loads(stack_file.read_text())
    except (OSError, ValueError):
        stack = {}
    chosen = stack.get("stack") if stack.get("stack") in ("cpu", "cuda") else None
    return AcceleratorInfo(
        source=found.source,
        driver=found.driver,
        cuda=found.cuda,
        # cuda without a GPU is validate's to refuse; the record says what runs here
        device="cuda" if found.has_gpu and device != "cpu" else "cpu",
        stack=chosen,
        stack_reason=stack.get("why") if chosen else None,
    )


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def other_python_versions(python: Path, names: tuple[str, ...]) -> dict[str, str | None] | None:
    """Package versions of another environment (an engine's own), or None where it does not
    exist."""
    if not python.exists():
        return None
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))"
    )
    result = subprocess.run(
        [str(python), "-c", code, *names], capture_output=True, text=True, timeout=60, check=False
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


# Run in a child interpreter (the project's or vLLM's): what torch's CPU kernels will use here.
# torch.cpu's checks look at CPUID and the OS's permission; vLLM's CPU build chooses by them
# (its _C_AVX512 or _C_AVX2 library, and AMX attention and linear kernels for bf16).
_TORCH_KERNELS = """
import json, torch
cpu = torch.cpu
def has(name):
    f = getattr(cpu, name, None)
    try:
        return bool(f()) if f else None
    except Exception:
        return None
print(json.dumps({
    "torch": torch.__version__,
    "capability": torch.backends.cpu.get_cpu_capability(),
    "avx512": has("_is_avx512_supported"),
    "avx512_bf16": has("_is_avx512_bf16_supported"),
    "amx_tile": has("_is_amx_tile_supported"),
    "amx_fp16": has("_is_amx_fp16_supported"),
    "mkldnn": torch.backends.mkldnn.is_available(),
}))
"""


def torch_kernels(python: Path) -> TorchKernels | None:
    """What torch in the environment of `python` dispatches to on this CPU (None: no torch).

    With ONEDNN_VERBOSE=1 a small bf16 matmul also names the ISA oneDNN picked.
    """
    if not python.exists():
        return None
    code = _TORCH_KERNELS + (
        "a = torch.ones(64, 64, dtype=torch.bfloat16); torch.nn.functional.linear(a, a)\n"
    )
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "OMP_NUM_THREADS": "1"}
    try:
        out = subprocess.run(
            [str(python), "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    lines = out.stdout.splitlines()
    try:
        found = json.loads(next(line for line in lines if line.startswith("{")))
    except (StopIteration, ValueError):
        return None
    isa = [line.split("isa:", 1)[1] for line in lines if ",isa:" in line]
    found["onednn_isa"] = isa[0] if isa else None
    return TorchKernels.model_validate(found)


def native_kernels(engines: Mapping[str, BaseModel | None]) -> Kernels:
    """Which kernels each native part picks here: the project's torch, and each engine's own as
    the engine reports them (``Engine.kernels``: llama.cpp's build, vLLM's torch), beside what
    the ISA probe saw execute.

    A torch that would use an instruction set the probe saw fault gets a warning: on such a
    machine its numbers (or its process) cannot be trusted.
    """
    # the ISA probe's verdicts, as the pinned llama.cpp build recorded them
    isa = (llama_build.build_info(llama_build.toolchain()) or {}).get("isa") or {}
    dropped = set(isa.get("dropped") or [])
    project = torch_kernels(Path(sys.executable))
    torches = [
        ("torch", project),
        *((n, k) for n, k in engines.items() if isinstance(k, TorchKernels)),
    ]
    warnings = []
    for name, found in torches:
        if found and found.amx_tile and dropped & {"amx-tile", "amx-int8", "amx-bf16"}:
            warnings.append(
                f"{name} reports AMX usable but the ISA probe saw AMX fault on this machine"
            )
    return Kernels(torch=project, warnings=warnings, **engines)


def fingerprint(
    environments: Mapping[str, tuple[Path, tuple[str, ...]]],
    kernels: Mapping[str, BaseModel | None],
    device: str = "auto",
) -> EnvInfo:
    """This machine and its software; ``environments``: each engine with an environment of its
    own (``Engine.environment``), as its interpreter and the distributions to record there;
    ``kernels``: each engine's entries of ``kernels`` (``Engine.kernels``, every engine's:
    ``quantbench.engines.registry.engine_kernels``); ``device``: ``runtime.device`` as params
    give it."""
    return EnvInfo(
        python=platform.python_version(),
        os=f"{platform.system()} {platform.release().split('-')[0]}",
        machine=platform.machine(),
        cpu=cpu_info(),
        memory_gib=memory_gib(),
        gpus=gpus(),
        accelerator=accelerator(device),
        packages=package_versions(),
        engine_envs={
            name: other_python_versions(python, packages)
            for name, (python, packages) in sorted(environments.items())
        },
        llama_cpp=LlamaCppRelease(
            release=f"{llama_build.PACKAGE}=={llama_build.VERSION}",
            cmake_flags=list(llama_build.CMAKE_FLAGS),
        ),
        kernels=native_kernels(kernels),
    )
