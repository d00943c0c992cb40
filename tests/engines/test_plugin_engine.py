"""An engine defined in the tests folder, registered by a plugin, through the real entry points:
config validation by its own settings model, `quantbench pairs`, and the estimator. No file under
src/ knows it. tests/test_plugins_under_dvc.py runs a plugin engine (with an environment of its
own and a sweep of its own settings) and a plugin format through `dvc repro`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).with_name("plugin_engine.py")


def params(tmp_path: Path) -> Path:
    data = {
        "plugins": [str(PLUGIN)],
        "data": {
            key: str(REPO / "data" / name)
            for key, name in (
                ("train", "train.jsonl"),
                ("heldout", "heldout.jsonl"),
                ("calibration", "calibration.txt"),
                ("eval", "eval.txt"),
            )
        },
        "variants": {"bf16": {"format": "bf16"}},
        "engines": {
            "echo": {"itl_ms": 1.0, "sweep": {"itl_ms": [1.0, 3.0]}},
            "transformers": {"enabled": False},
            "vllm": {"enabled": False},
            "llamacpp": {"enabled": False},
        },
        "workloads": {
            "random": {
                "prompts": {"source": "random", "input_len": 8, "output_len": 4},
                "load": [{"kind": "concurrency", "concurrency": 2}],
                "num_requests": 6,
                "fixed_output_length": True,
            }
        },
        "slo": "ttft:p50<=2s",
        "bench": {"pairs": {"bf16-echo": {"variant": "bf16", "engine": "echo"}}},
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def test_plugin_engine_validates_and_is_listed(tmp_path: Path) -> None:
    path = params(tmp_path)
    done = run(["-m", "quantbench.cli", "validate", "--params", str(path)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "engines" in done.stdout and "echo" in done.stdout
    pairs = run(["-m", "quantbench.cli", "pairs", "--params", str(path)], tmp_path)
    assert pairs.returncode == 0, pairs.stderr
    assert "bf16-echo: {variant: bf16, engine: echo}" in pairs.stdout


def test_plugin_engine_is_estimated_like_a_built_in_one(tmp_path: Path) -> None:
    """The estimator asks the registry: a plugin engine is an `estimate.engine` choice, `auto`
    may pick it, and its own kernel efficiencies apply (no estimator file names it)."""
    code = f"""
import runpy
runpy.run_path({str(PLUGIN)!r})
from quantbench.estimate.engines import engine_choices, kernel_efficiency, resolve_engine
from quantbench.estimate.lookup import resolve_hardware
from quantbench.estimate.spec import EstimateSettings
from tests.estimate.conftest import fake_cpu
cpu, gpu = fake_cpu(), resolve_hardware("L4")
assert "echo" in engine_choices() and EstimateSettings(engine="echo").engine == "echo"
assert resolve_engine("auto", "bf16", cpu) == "echo"
assert resolve_engine("auto", "bf16", gpu) == "vllm"
assert resolve_engine("auto", "gguf", cpu) == "llamacpp"  # echo does not serve GGUF
assert kernel_efficiency("echo", cpu).bandwidth == 0.4
print("ok")
"""
    done = run(["-c", code], REPO)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_plugin_engine_settings_are_validated_by_its_own_model(tmp_path: Path) -> None:
    path = params(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["engines"]["echo"]["itl_ms"] = -1
    data["engines"]["echo"]["colour"] = "blue"
    path.write_text(yaml.safe_dump(data))
    done = run(["-m", "quantbench.cli", "validate", "--params", str(path)], tmp_path)
    assert done.returncode == 2
    assert "engines.echo.itl_ms: got -1" in done.stderr
    assert "engines.echo.colour: unknown key; allowed keys here:" in done.stderr
    assert "itl_ms" in done.stderr.split("colour")[1]
