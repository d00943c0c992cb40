"""The quantizers: determinism (GGUF on the embedded model, GPTQ and AWQ on a tiny one), bf16 as
the merged model byte for byte, and validation before any work.

What each real quantizer writes for the embedded model (GPTQ's, AWQ's and both GGUF types'
configs, files, sizes and records) is checked on the pipeline's own variants
(tests/report/test_pipeline_e2e.py::test_each_checkpoint_is_what_its_recipe_asks): quantizing
the embedded model here as well cost CI 200 s of the same work.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from quantbench.formats.base import VariantSpecError
from quantbench.formats.registry import recipe
from quantbench.fsutil import sha256_file, sha256_tree
from quantbench.quantize import build_variant

REPO = Path(__file__).resolve().parents[2]
# A small, honest calibration set for tests: the shipped file's first passages, short.
SMALL_CALIBRATION = {"samples": 6, "max_tokens": 128}


def spec(**raw: Any) -> Any:
    return recipe(raw)


@pytest.fixture(scope="module")
def calibration() -> Path:
    return REPO / "data" / "calibration.txt"


def build(name: str, recipe: Any, source: Path, out: Path, calibration: Path | None = None):
    return build_variant(name, recipe, source, out, calibration, threads=1)


def test_bad_recipes_fail_before_any_work(tiny_model_dir: Path, tmp_path: Path) -> None:
    # tiny model: hidden 64, intermediate 128
    start = time.perf_counter()
    with pytest.raises(VariantSpecError, match=r"'gptq-g128'.*group_size=128.*hidden_size=64"):
        build("gptq-g128", spec(format="gptq", group_size=128), tiny_model_dir, tmp_path / "a")
    with pytest.raises(VariantSpecError, match=r"'awq-x'.*calibration file"):
        build("awq-x", spec(format="awq"), tiny_model_dir, tmp_path / "b", tmp_path / "none.txt")
    with pytest.raises(VariantSpecError, match=r"'q8'.*config.json"):
        build("q8", spec(format="gguf", type="Q8_0"), tmp_path / "no-model", tmp_path / "c")
    assert time.perf_counter() - start < 5
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.slow
def test_bf16_is_the_merged_model_byte_for_byte(prepared_base: Path, tmp_path: Path) -> None:
    info = build("bf16", spec(format="bf16"), prepared_base, tmp_path / "bf16")
    assert sha256_file(info.weights_path) == sha256_file(prepared_base / "model.safetensors")
    assert info.record.bits_per_weight == pytest.approx(16.0, abs=0.1)
    assert (tmp_path / "bf16" / "chat_template.jinja").is_file()


@pytest.mark.slow
def test_gguf_is_deterministic(prepared_base: Path, tmp_path: Path) -> None:
    recipe = spec(format="gguf", type="Q4_K_M")
    hashes = [
        sha256_tree(build("q4", recipe, prepared_base, tmp_path / run).directory)
        for run in ("a", "b")
    ]
    assert hashes[0] == hashes[1]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["gptq", "awq"])
def test_calibrated_quantizers_are_deterministic(
    fmt: str, tiny_model_dir: Path, tmp_path: Path, calibration: Path
) -> None:
    """Twice on the same inputs, byte-identical folders (the tiny model keeps this cheap)."""
    recipe = spec(format=fmt, group_size=32, calibration=SMALL_CALIBRATION)
    dirs = [
        build(fmt, recipe, tiny_model_dir, tmp_path / run, calibration).directory
        for run in ("a", "b")
    ]
    assert "quantization_config" in json.loads((dirs[0] / "config.json").read_text())
    assert sha256_tree(dirs[0]) == sha256_tree(dirs[1])
