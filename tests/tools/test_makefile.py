"""`make plan` prices the run before it starts: on a fresh clone it makes what the plan times
requests by (this machine's calibration, the workloads' traffic) before it asks for the plan,
where it printed every pair's time as unknown before."""

from __future__ import annotations

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
