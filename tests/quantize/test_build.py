"""Each quantizer on the real embedded model, determinism, and validation before any work."""

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
def test_gguf_q8_0_and_q4_k_m(prepared_base: Path, tmp_path: Path) -> None:
    from gguf import GGUFReader

    # llama_ftype values (llama.h): MOSTLY_Q8_0 = 7, MOSTLY_Q4_K_M = 15
    expected = {"Q8_0": (7, 8.0, 9.0), "Q4_K_M": (15, 5.0, 7.0)}
    for gguf_type, (ftype, low, high) in expected.items():
        name = f"gguf-{gguf_type.lower()}"
        info = build(name, spec(format="gguf", type=gguf_type), prepared_base, tmp_path / name)
        assert info.weights_file == f"model-{gguf_type}.gguf"
        reader = GGUFReader(info.weights_path)
        assert reader.fields["general.file_type"].contents() == ftype
        assert reader.fields["general.name"].contents() == name  # not the source folder's name
        assert low < info.record.bits_per_weight < high
        assert info.record.libraries["llama-cpp-python"].startswith("0.3.36")


@pytest.mark.slow
def test_gguf_is_deterministic(prepared_base: Path, tmp_path: Path) -> None:
    recipe = spec(format="gguf", type="Q4_K_M")
    hashes = [
        sha256_tree(build("q4", recipe, prepared_base, tmp_path / run).directory)
        for run in ("a", "b")
    ]
    assert hashes[0] == hashes[1]


@pytest.mark.slow
def test_gptq_on_the_embedded_model(prepared_base: Path, tmp_path: Path, calibration: Path) -> None:
    recipe = spec(format="gptq", bits=4, group_size=64, calibration=SMALL_CALIBRATION)
    info = build("gptq-w4g64", recipe, prepared_base, tmp_path / "gptq", calibration)
    config = json.loads((info.directory / "config.json").read_text())
    quant = config["quantization_config"]
    assert (quant["bits"], quant["group_size"], quant["sym"]) == (4, 64, True)
    assert quant["checkpoint_format"] == "gptq"
    assert quant["meta"]["offload_to_disk_path"] is None  # no random temp path in the output
    assert info.record.calibration.samples_used == 6
    # 4-bit weights + bf16 embeddings (tied, not quantized): well under the bf16 size
    assert 5.0 < info.record.bits_per_weight < 8.0


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


@pytest.mark.slow
def test_awq_on_the_embedded_model(prepared_base: Path, tmp_path: Path, calibration: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    # three scale ratios searched per layer (the fewest it can), not llm-compressor's 20: what
    # is checked here is the checkpoint the real quantizer writes (the search's cost is about
    # proportional to the grid: 815 s at 20 on an AVX2-only EPYC, 109 s at 3; the pipeline runs
    # the grid as params.yaml sets it)
    recipe = spec(format="awq", group_size=64, n_grid=3, calibration=SMALL_CALIBRATION)
    info = build("awq-w4g64", recipe, prepared_base, tmp_path / "awq", calibration)
    quant = json.loads((info.directory / "config.json").read_text())["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors" and quant["format"] == "pack-quantized"
    weights = quant["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["group_size"], weights["symmetric"]) == (4, 64, False)
    assert quant["ignore"] == ["lm_head"]
    model = AutoModelForCausalLM.from_pretrained(info.directory, dtype=torch.float32)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([[1, 504, 3458, 314]])).logits
    assert torch.isfinite(logits).all()
