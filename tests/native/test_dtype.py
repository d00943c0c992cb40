"""The compute dtype is measured, not assumed (quantbench.native.dtype)."""

from __future__ import annotations

import pytest

from quantbench.errors import UserError
from quantbench.native import dtype as dt


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test probes afresh, and leaves the process as it found it: the probe writes its
    answer into the environment (for child processes), so the variable is recorded with
    setenv before it is removed. delenv alone records nothing where it is unset, and a mocked
    "bf16 is faster" answer then stayed for every later test of the worker: each quantizer and
    server after it computed in bf16, emulated on an AVX2-only EPYC (AWQ's test 180 s, not 40)."""
    dt.probe.cache_clear()
    monkeypatch.setenv(dt.ENV, "")
    monkeypatch.delenv(dt.ENV)
    yield
    dt.probe.cache_clear()


def test_bf16_where_it_is_not_slower_than_float32(monkeypatch) -> None:
    import torch

    times = {torch.bfloat16: 0.004, torch.float32: 0.006}
    monkeypatch.setattr(dt, "_time", lambda d: times[d])  # _compare alternates them
    got = dt.probe()
    assert got.dtype == "bfloat16" and got.source == "measured"
    assert "a bf16 product took 4.0 ms, float32 6.0 ms" in got.note


def test_float32_where_bf16_is_emulated(monkeypatch) -> None:
    """An AVX2-only CPU converts every bf16 product in software (5x slower than float32 under
    ONEDNN_MAX_CPU_ISA=AVX2 on a Xeon, the same order as on an EPYC without AVX-512)."""
    import torch

    times = {torch.bfloat16: 0.040, torch.float32: 0.008}
    monkeypatch.setattr(dt, "_time", lambda d: times[d])
    assert dt.compute_dtype() == "float32"
    import os

    assert os.environ[dt.ENV] == "float32"  # what a child process inherits


def test_the_environment_overrides_and_is_checked(monkeypatch) -> None:
    monkeypatch.setenv(dt.ENV, "bfloat16")
    assert dt.probe().source == f"set by {dt.ENV}"
    dt.probe.cache_clear()
    monkeypatch.setenv(dt.ENV, "fp8")
    with pytest.raises(UserError, match="give one of bfloat16, float32"):
        dt.probe()


def test_the_probe_runs_here() -> None:
    got = dt.probe()
    assert got.dtype in dt.DTYPES and got.bf16_s and got.fp32_s


@pytest.mark.slow
def test_these_tests_leave_the_measured_dtype_to_the_tests_after_them(tmp_path) -> None:
    """This module's tests, run first in a fresh process with the variable unset (as in a CI
    worker), leave it at what this CPU measures: they once left a mocked bf16 behind, and on an
    AVX2-only EPYC every later quantizer and server of that worker computed in emulated bf16."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "dtype_after.py").write_text(
        "import json, os\n"
        "def pytest_sessionfinish(session):\n"
        "    from quantbench.native import dtype as dt\n"
        f"    with open({str(tmp_path / 'after.json')!r}, 'w') as out:\n"
        f"        json.dump([os.environ.get({dt.ENV!r}), dt.measure().dtype], out)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != dt.ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    repo = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "dtype_after",
         "-m", "not slow", str(Path(__file__))],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:]
    left, measured = json.loads((tmp_path / "after.json").read_text())
    assert left == measured, (left, measured)
