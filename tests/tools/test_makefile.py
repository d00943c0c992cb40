"""`make plan` prices the run before it starts: on a fresh clone it makes what the plan times
requests by (this machine's calibration, the workloads' traffic) before it asks for the plan,
where it printed every pair's time as unknown before."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
@pytest.mark.parametrize("target", ["plan", "plan-full"])
def test_make_plan_makes_its_inputs_before_it_prices(target: str) -> None:
    dry = subprocess.run(
        ["make", "-n", target], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    inputs = next(i for i, line in enumerate(dry) if "dvc repro" in line)
    assert "calibrate" in dry[inputs] and "workloads" in dry[inputs]
    priced = next(i for i, line in enumerate(dry) if "quantbench plan" in line)
    assert inputs < priced


# `make setup` picks the stack for the machine (quantbench.native.stack): the dry run's commands,
# for fresh environments under tmp_path, with the stand-in GPU first on PATH and without a GPU.
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


# what a make that runs this test (`make test`, CI) hands its children: without it, the make
# below is a top-level one, as a user's is (with it, it is a sub-make, printing its directory
# first and taking the parent's flags)
PARENT_MAKE = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR")


def _dry_run(tmp_path: Path, *args: str) -> list[str]:
    venvs = [f"VENV={tmp_path / 'venv'}", f"VLLM_VENV={tmp_path / 'venv-vllm'}"]
    env = {k: v for k, v in os.environ.items() if k not in PARENT_MAKE}
    done = subprocess.run(
        ["make", "-n", *args, *venvs], cwd=REPO, capture_output=True, text=True, check=True,
        env=env,
    )  # fmt: skip
    return done.stdout.splitlines()


def _installs(lines: list[str]) -> list[str]:
    return [line for line in lines if "/bin/uv pip install " in line]


@needs_make
def test_make_setup_on_a_gpu_machine_installs_the_cuda_stack(fake_gpu, tmp_path: Path) -> None:
    lines = _dry_run(tmp_path, "setup")
    text = "\n".join(lines)
    assert "quantbench.native.stack --write" in lines[0]  # the stack's line, recorded
    assert "grep -E '^torch==' requirements-cuda.txt" in text
    assert "-r requirements.txt -r requirements-cuda.txt" in text
    assert "-r requirements-vllm-cuda.txt" in text and "requirements-vllm.txt" not in text
    # PyPI's CUDA build of torch, never the local CPU wheel the find-links hold
    assert not any("--find-links" in line for line in _installs(lines)), _installs(lines)
    assert text.count("quantbench.native.stack --check-torch") == 2
    # vllm needs the torchvision and torchaudio it pulls: kept
    assert not any("uninstall" in line and "torchvision" in line for line in lines)
    [llama] = [line for line in lines if "llama_build build" in line]
    assert llama.endswith("--target llama-server --device cuda")
    assert "-DGGML_CUDA=ON" in text


@needs_make
def test_make_setup_without_a_gpu_installs_todays_cpu_stack(no_gpu, tmp_path: Path) -> None:
    lines = _dry_run(tmp_path, "setup")
    text = "\n".join(lines)
    assert "grep -E '^torch==' requirements.txt" in text
    assert "-c constraints.txt -r requirements.txt" in text and "-r requirements-vllm.txt" in text
    assert "uninstall -q --python" in text and "torchvision torchaudio torchcodec" in text
    for cuda_only in ("requirements-cuda", "requirements-vllm-cuda", "GGML_CUDA", "--check-torch"):
        assert cuda_only not in text
    [llama] = [line for line in lines if "llama_build build" in line]
    assert llama.endswith("llama_build build --target llama-server")  # as it was: no --device
    found = subprocess.run(
        ["python3", "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    if "find-links=" in found:  # the local wheels pip is given are handed on to uv, as before
        assert all("--find-links" in line for line in _installs(lines))


@needs_make
def test_a_gpu_machine_can_keep_the_cpu_stack(fake_gpu, tmp_path: Path) -> None:
    lines = _dry_run(tmp_path, "setup", "STACK=cpu")
    text = "\n".join(lines)
    assert "quantbench.native.stack --device cpu --write" in lines[0]
    assert "-r requirements-vllm.txt" in text and "requirements-cuda" not in text
    assert any(line.endswith("--target llama-server --device cpu") for line in lines)


@needs_make
def test_an_environment_set_up_for_one_stack_is_set_up_again_for_the_other(
    fake_gpu, no_gpu, tmp_path: Path, monkeypatch
) -> None:
    venv, vllm = tmp_path / "venv", tmp_path / "venv-vllm"
    for folder in (venv, vllm):
        folder.mkdir()
        (folder / ".setup-done").touch()  # set up for the cpu stack, after every requirement
    assert _installs(_dry_run(tmp_path, "base", "vllm")) == []  # QUANTBENCH_DEVICE=cpu: kept
    monkeypatch.delenv("QUANTBENCH_DEVICE")  # the stand-in GPU shows: the cuda stack
    lines = _dry_run(tmp_path, "base", "vllm")
    assert f"rm -f {venv}/.setup-done && {venv}/bin/uv pip uninstall -q --python" in "\n".join(
        lines
    )
    assert f"rm -rf {vllm}" in lines and f"touch {venv}/.setup-done-cuda" in lines
    assert _installs(lines)
    # and back: a cuda environment asked to be cpu again drops the CUDA build of torch
    for folder in (venv, vllm):
        (folder / ".setup-done").unlink()
        (folder / ".setup-done-cuda").touch()
    back = _dry_run(tmp_path, "base", "vllm", "STACK=cpu")
    assert any(line.startswith(f"rm -f {venv}/.setup-done-cuda &&") for line in back)
    assert f"rm -rf {vllm}" in back and f"touch {vllm}/.setup-done" in back
