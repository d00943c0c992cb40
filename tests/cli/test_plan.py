"""`quantbench plan` prices profiles/gpu.yaml (a 7B hub model on one GPU) before anything runs:
on the GPU machine by the GPU found there, anywhere for a GPU named with --hardware, from the
model's shipped config.json and the traffic generated in memory; and the CPU's plan is as it
was where the pipeline's calibration and traffic exist."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from quantbench.cli.main import main
from quantbench.cli.plan import add_plan_arguments, profile_overrides, run_plan, with_overrides

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles/gpu.yaml"
PAIRS = 7  # profiles/gpu.yaml's bench.pairs


def _plan(tmp_path: Path, capsys, *argv: str) -> tuple[dict[str, str], str]:
    """Plan with nothing of this checkout's runs (calibration, traffic, probes, reports) in the
    way: each pair's expected time, and the whole output."""
    parser = argparse.ArgumentParser()
    add_plan_arguments(parser)
    args = parser.parse_args([
        "--calibration", str(tmp_path / "none.json"), "--workloads", str(tmp_path / "workloads"),
        "--model", str(tmp_path / "base"), "--bench", str(tmp_path / "bench"),
        "--quality", str(tmp_path / "quality"), *argv,
    ])  # fmt: skip
    assert run_plan(args) == 0
    out = capsys.readouterr().out
    rows = {
        cells[1].strip(): cells[-2].strip()
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith("| pair")
        for cells in [line.split("|")]
    }
    return rows, out


def _total(out: str) -> float:
    found = re.search(r"Expected bench time: ([0-9.]+) min\.", out)
    assert found, out
    return float(found.group(1))


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the profile's and params.yaml's paths are the project's


def test_the_gpu_profile_is_priced_by_the_gpu_found_here(fake_gpu, tmp_path, capsys) -> None:
    rows, out = _plan(tmp_path, capsys, "--overlay", str(PROFILE))
    assert len(rows) == PAIRS and all(t.endswith(" min") for t in rows.values()), rows
    assert "priced on the datasheet H100 (80 GB, 3350 GB/s" in out
    assert "the GPU found here, NVIDIA H100 80GB HBM3, is not calibrated" in out
    assert "the model's shape from profiles/models/qwen2.5-7b-instruct/config.json" in out
    assert "counted in words: the workloads stage has not run" in out
    assert 5 < _total(out) < 24 * 60


def test_without_a_gpu_it_is_priced_for_the_gpu_asked_for(no_gpu, tmp_path, capsys) -> None:
    _, unpriced = _plan(tmp_path, capsys, "--overlay", str(PROFILE))
    assert "Expected bench time: unknown" in unpriced
    assert "no timing: runtime.device is cuda, and this machine has no NVIDIA GPU" in unpriced
    rows, out = _plan(tmp_path, capsys, "--overlay", str(PROFILE), "--hardware", "H100-SXM")
    assert "priced on the datasheet H100 (80 GB" in out and "(--hardware H100-SXM)" in out
    assert all(t.endswith(" min") for t in rows.values())
    h100 = _total(out)
    _, l4 = _plan(tmp_path, capsys, "--overlay", str(PROFILE), "--hardware", "L4")
    assert _total(l4) > 2 * h100  # a tenth of the bandwidth: far slower points, and fails


def test_the_profile_validates_on_a_gpu_and_is_refused_without_one(
    fake_gpu_factory, tmp_path, capsys
) -> None:
    params = with_overrides(REPO / "params.yaml", profile_overrides(PROFILE))
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    fake_gpu_factory("h100")
    assert main(["validate", "--params", str(path), "--quiet"]) == 0
    assert "device: cuda (1 x NVIDIA H100 80GB HBM3" in capsys.readouterr().out


def test_the_profile_is_refused_where_there_is_no_gpu(no_gpu, tmp_path, capsys) -> None:
    params = with_overrides(REPO / "params.yaml", profile_overrides(PROFILE))
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    assert main(["validate", "--params", str(path), "--quiet"]) == 2
    assert "runtime.device: 'cuda', but this machine has no NVIDIA GPU" in capsys.readouterr().err


def test_the_cpus_plan_says_nothing_new_where_its_inputs_exist(
    no_gpu, tiny_model_dir, tmp_path, capsys
) -> None:
    """This machine's calibration and the workloads' traffic on disk, the model prepared: the
    plan prices by them and prints none of the lines of a plan that stands something in."""
    from tests.schemas import examples

    from quantbench.config import load_config
    from quantbench.schemas import io as schema_io
    from quantbench.workloads.traffic import materialize

    schema_io.write(tmp_path / "this.json", examples.machine_calibration())
    for spec in load_config(REPO / "params.yaml").workloads.values():
        materialize(spec, [REPO / "data/calibration.txt"]).write(tmp_path / "workloads")
    rows, out = _plan(tmp_path, capsys, "--calibration", str(tmp_path / "this.json"),
                      "--model", str(tiny_model_dir))  # fmt: skip
    assert rows and all(t.endswith(" min") for t in rows.values()), rows
    for new in ("priced on", "the model's shape from", "as generated here", "not counted"):
        assert new not in out, new
