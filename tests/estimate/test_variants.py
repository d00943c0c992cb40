"""``--variant`` text -> EstimatedVariant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.schemas import examples

from quantbench.estimate.variants import parse_variant, variant_from_quantization_config
from quantbench.schemas import io as schema_io
from quantbench.schemas.estimate_inputs import EstimatedVariant

from .conftest import TINY_CONFIG


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    return tmp_path


def test_forms(folder):
    assert parse_variant("bf16", folder).format == "bf16"
    assert parse_variant("Q4_K_M", folder).gguf_type == "Q4_K_M"
    assert parse_variant("gguf:q8_0", folder).gguf_type == "Q8_0"
    awq = parse_variant("awq:bits=4,group_size=32,sym=true", folder)
    assert (awq.format, awq.group_size, awq.sym) == ("awq", 32, True)
    auto = parse_variant("auto", folder)
    assert auto.format == "bf16" and auto.path == folder


def test_known_names_win(folder):
    known = {"q4": EstimatedVariant(name="q4", format="gguf", gguf_type="Q4_0")}
    assert parse_variant("q4", folder, known).gguf_type == "Q4_0"


def test_errors_name_the_text_and_the_forms(folder):
    with pytest.raises(ValueError, match="'mystery'.*GGUF type"):
        parse_variant("mystery", folder)
    with pytest.raises(ValueError, match="key=value"):
        parse_variant("gptq:bits", folder)
    with pytest.raises(ValueError, match="sym='maybe'"):
        parse_variant("gptq:sym=maybe", folder)


def test_quantization_configs():
    gptq = variant_from_quantization_config(
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}
    )
    assert gptq.label == "gptq-w4g128-sym"
    ct = variant_from_quantization_config(
        {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {
                "group_0": {"weights": {"num_bits": 4, "group_size": 64, "symmetric": False}}
            },
        }
    )
    assert ct.label == "awq-w4g64-asym"
    with pytest.raises(ValueError, match="'bitsandbytes'"):
        variant_from_quantization_config({"quant_method": "bitsandbytes"})


def test_quantised_folder(folder):
    config = {**TINY_CONFIG, "quantization_config": {"quant_method": "gptq", "bits": 8}}
    (folder / "config.json").write_text(json.dumps(config))
    variant = parse_variant(str(folder), folder)
    assert (variant.format, variant.bits, variant.path) == ("gptq", 8, folder)


def test_a_folder_is_the_format_the_one_detector_says(tmp_path: Path) -> None:
    """A GGUF variant folder keeps the model's config.json beside its .gguf: the estimator read
    it as bf16 (config.json first), the server as GGUF (variant.json first). One detector now."""
    from quantbench.model import embedded_gguf_path

    folder = tmp_path / "gguf-q4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.gguf").symlink_to(embedded_gguf_path())
    record = examples.variant_record("gguf-q4_k_m").model_copy(
        update={"name": "gguf-q4", "weights_file": "model.gguf"}
    )
    schema_io.write(folder / "variant.json", record)
    variant = parse_variant(str(folder), tmp_path)
    assert variant.format == "gguf" and variant.path == folder / "model.gguf"
    assert variant.gguf_type is not None
