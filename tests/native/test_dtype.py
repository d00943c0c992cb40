"""The compute dtype is measured, not assumed (quantbench.native.dtype)."""

from __future__ import annotations

import pytest

from quantbench.errors import UserError
from quantbench.native import dtype as dt


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    dt.probe.cache_clear()
    monkeypatch.delenv(dt.ENV, raising=False)
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
