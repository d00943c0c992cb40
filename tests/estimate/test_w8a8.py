"""int8 W8A8 in the estimator: nominal bytes by hand, real files, detection, compute dtype."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from quantbench.estimate.arch import architecture_from_config, read_architecture
from quantbench.estimate.checkpoint import safetensors_weight_bytes, variant_weight_bytes
from quantbench.estimate.formats import nominal_weight_bytes
from quantbench.estimate.hardware import hardware_rates
from quantbench.estimate.variants import parse_variant, variant_from_quantization_config
from quantbench.schemas.estimate_inputs import EstimatedVariant

from .conftest import TINY_CONFIG, fake_cpu

# tiny: 1152 body weights, 256 embedding (tied head), 40 norm weights; 128 output rows in the
# layers (2 x (q 8 + k 4 + v 4 + o 8 + gate 16 + up 16 + down 8))
BODY, EMBEDDING, NORMS, ROWS = 1152, 256, 40, 128

W8A8_QCONFIG: dict[str, Any] = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "ignore": ["lm_head"],
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
            "input_activations": {
                "num_bits": 8,
                "type": "int",
                "symmetric": True,
                "strategy": "token",
                "dynamic": True,
            },
        }
    },
}


def test_nominal_bytes_by_hand(tiny):
    w = nominal_weight_bytes(tiny, EstimatedVariant(format="w8a8"))
    # one byte per layer weight plus a 16-bit scale per output row; embedding and norms bf16
    assert w.stored_bytes == BODY + 2 * ROWS + 2 * EMBEDDING + 2 * NORMS
    assert w.bytes_by_type == {"int8": BODY + 2 * ROWS, "bf16": 2 * EMBEDDING, "norms": 2 * NORMS}
    assert w.compute_dtype == "int8"
    assert "16-bit scale per output row" in w.detail


def test_smollm2_is_about_half_of_bf16(smol):
    w8a8 = nominal_weight_bytes(smol, EstimatedVariant(format="w8a8"))
    bf16 = nominal_weight_bytes(smol, EstimatedVariant(format="bf16"))
    # the tied 49152 x 576 embedding (28 M of 135 M weights) stays bf16
    assert 0.55 < w8a8.stored_bytes / bf16.stored_bytes < 0.65
    assert w8a8.bits_per_weight == pytest.approx(9.7, abs=0.1)


def test_no_group_settings():
    assert EstimatedVariant(format="w8a8").label == "w8a8"
    with pytest.raises(ValidationError, match="bits does not apply to format w8a8"):
        EstimatedVariant(format="w8a8", bits=8)


def test_detected_from_config_and_distinct_from_awq(tmp_path):
    assert variant_from_quantization_config(W8A8_QCONFIG).format == "w8a8"
    weight_only = {**W8A8_QCONFIG, "config_groups": {"group_0": {"weights": {"num_bits": 8}}}}
    assert variant_from_quantization_config(weight_only).format == "awq"
    (tmp_path / "config.json").write_text(
        json.dumps({**TINY_CONFIG, "quantization_config": W8A8_QCONFIG})
    )
    variant = parse_variant(str(tmp_path), tmp_path)
    assert (variant.format, variant.path) == ("w8a8", tmp_path)
    assert parse_variant("w8a8", tmp_path).format == "w8a8"


def test_real_file_bytes_match_the_nominal_layout(tiny_folder):
    """A compressed-tensors int-quantized file: I8 weights, BF16 [rows, 1] scales."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    path = tiny_folder / "model.safetensors"
    tensors = {}
    for name, tensor in load_file(str(path)).items():
        if ".layers." in name and name.endswith("proj.weight"):
            tensors[name] = torch.zeros(tensor.shape, dtype=torch.int8)
            tensors[name + "_scale"] = torch.ones(tensor.shape[0], 1, dtype=torch.bfloat16)
        else:
            tensors[name] = tensor
    save_file(tensors, str(path))
    config = {**TINY_CONFIG, "quantization_config": W8A8_QCONFIG}
    (tiny_folder / "config.json").write_text(json.dumps(config))
    arch = read_architecture(tiny_folder)
    variant = EstimatedVariant(format="w8a8", path=tiny_folder)
    real = variant_weight_bytes(arch, variant)
    nominal = nominal_weight_bytes(arch, variant)
    assert real.source == "file"
    assert real.compute_dtype == "int8"
    assert real.stored_bytes == nominal.stored_bytes
    assert real.streamed_bytes == nominal.streamed_bytes
    assert safetensors_weight_bytes(tiny_folder, arch).bytes_by_type["I8"] == BODY


def test_int8_rate_used_where_measured_else_bf16(tiny):
    cpu = fake_cpu()
    assert (
        hardware_rates(cpu, "int8").compute_dtype == "bf16"
    )  # no int8 figure: falls back, and says so
    assert "no int8" in hardware_rates(cpu, "int8").notes[0]
    measured = cpu.model_copy(update={"matmul_tflops": {**cpu.matmul_tflops, "int8": 0.8}})
    assert hardware_rates(measured, "int8").peak_flops == pytest.approx(0.8e12)


def test_architecture_is_unchanged_by_the_quantization_config():
    arch = architecture_from_config({**TINY_CONFIG, "quantization_config": W8A8_QCONFIG})
    assert arch.total_params == architecture_from_config(TINY_CONFIG).total_params
