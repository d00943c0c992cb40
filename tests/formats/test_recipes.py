"""Variant recipes: parsing, and errors that name the variant, the key, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from quantbench.formats.awq import AwqSpec
from quantbench.formats.base import VariantSpecError, validate_name
from quantbench.formats.bf16 import Bf16Spec
from quantbench.formats.gguf import GGUF_TYPES, GgufSpec
from quantbench.formats.gptq import GptqSpec
from quantbench.formats.registry import get_format, recipe
from quantbench.quantize import check_calibration_file

SMOLLM2 = SimpleNamespace(hidden_size=576, intermediate_size=1536)


def parse(raw: dict[str, Any]) -> Any:
    return recipe(raw)


def validate_against_model(name: str, spec: Any, arch: Any) -> None:
    get_format(spec.format).validate_against_model(name, spec, arch)


def error_of(raw: dict[str, Any]) -> str:
    with pytest.raises((ValidationError, VariantSpecError)) as info:
        parse(raw)
    return str(info.value)


def test_format_picks_the_recipe_model() -> None:
    assert isinstance(parse({"format": "bf16"}), Bf16Spec)
    gptq = parse({"format": "gptq", "bits": 4, "group_size": 64})
    assert isinstance(gptq, GptqSpec) and gptq.sym and not gptq.desc_act
    awq = parse({"format": "awq"})
    assert isinstance(awq, AwqSpec) and awq.sym is False and awq.group_size == 64
    gguf = parse({"format": "gguf", "type": "q4_k_m"})
    assert isinstance(gguf, GgufSpec) and gguf.type == "Q4_K_M" and gguf.intermediate == "f16"


def test_unknown_format_lists_the_formats() -> None:
    text = error_of({"format": "exl2"})
    assert "'exl2'" in text and all(fmt in text for fmt in ("bf16", "gptq", "awq", "gguf"))


def test_unknown_gguf_type_lists_allowed_types() -> None:
    text = error_of({"format": "gguf", "type": "Q9_K"})
    assert "Q9_K" in text and "Q8_0" in text and "Q4_K_M" in text


def test_key_of_another_format_is_rejected() -> None:
    text = error_of({"format": "gguf", "type": "Q8_0", "group_size": 64})
    assert "group_size" in text and "Extra inputs are not permitted" in text


def test_bits_the_library_cannot_write_are_rejected() -> None:
    assert "bits" in error_of({"format": "gptq", "bits": 5})
    assert "bits" in error_of({"format": "awq", "bits": 3})


@pytest.mark.parametrize("group_size", [0, 48, 100, -2])
def test_group_size_must_be_a_power_of_two(group_size: int) -> None:
    text = error_of({"format": "gptq", "group_size": group_size})
    assert str(group_size) in text and "power of two" in text


def test_converter_types_need_their_own_intermediate() -> None:
    assert parse({"format": "gguf", "type": "BF16", "intermediate": "bf16"}).type == "BF16"
    assert "intermediate: bf16" in error_of({"format": "gguf", "type": "BF16"})


def test_group_size_that_does_not_divide_the_model_names_variant_key_and_options() -> None:
    spec = parse({"format": "gptq", "group_size": 128})
    with pytest.raises(VariantSpecError) as info:
        validate_against_model("gptq-w4g128", spec, SMOLLM2)
    text = str(info.value)
    assert "gptq-w4g128" in text
    assert "variants.gptq-w4g128.group_size=128" in text
    assert "hidden_size=576" in text
    assert "intermediate_size" not in text.split("allowed")[0]  # 1536 = 12 * 128 divides
    assert "allowed here: -1, 16, 32, 64" in text


@pytest.mark.parametrize(
    "raw", [{"format": "awq", "group_size": 64}, {"format": "gptq", "group_size": -1}]
)
def test_group_sizes_that_divide_pass(raw: dict[str, Any]) -> None:
    assert validate_against_model("ok", parse(raw), SMOLLM2) is None  # no error raised


def test_formats_without_groups_skip_the_shape_check() -> None:
    assert validate_against_model("g", parse({"format": "gguf", "type": "Q4_K_M"}), SMOLLM2) is None
    assert validate_against_model("b", parse({"format": "bf16"}), SMOLLM2) is None


def test_missing_calibration_file_is_named(tmp_path) -> None:
    spec = parse({"format": "awq"})
    with pytest.raises(VariantSpecError) as info:
        check_calibration_file("awq-w4g64", spec, tmp_path / "nope.txt")
    text = str(info.value)
    assert "awq-w4g64" in text and "nope.txt" in text and "data.calibration" in text
    # Formats that do not calibrate do not care.
    check_calibration_file("q8", parse({"format": "gguf", "type": "Q8_0"}), None)


@pytest.mark.parametrize("name", ["Q8", "has space", "", "a/b", "x" * 65])
def test_variant_names_are_folder_safe(name: str) -> None:
    with pytest.raises(VariantSpecError):
        validate_name(name)


def test_every_listed_gguf_type_exists_in_llama_cpp_headers() -> None:
    """The allowed list must match the pinned llama.cpp (checked on its header, no build)."""
    from quantbench.native.llama_build import toolchain

    header = toolchain().llama_cpp_dir / "include" / "llama.h"
    if not header.is_file():
        pytest.skip(
            "pinned llama.cpp source not unpacked (python -m quantbench.native.llama_build build)"
        )
    text = header.read_text()
    for gguf_type in GGUF_TYPES:
        assert f"LLAMA_FTYPE_MOSTLY_{gguf_type} " in text, gguf_type


@pytest.mark.parametrize("duo_scaling", [True, False])
def test_awq_grid_is_accepted_exactly_when_llm_compressor_can_build_it(duo_scaling: bool) -> None:
    # n_grid 2 with duo scaling passed our validation and divided by zero inside llm-compressor's
    # scale search (CI, an AVX2-only EPYC): the spec now refuses what the library cannot search
    from llmcompressor.modifiers.transform.awq import AWQModifier  # what formats/awq.py runs

    for n_grid in range(1, 7):
        modifier = AWQModifier(duo_scaling=duo_scaling, n_grid=n_grid)
        try:
            # a search: more than the identity scaling alone
            builds = len(set(modifier._get_grid_search_params())) >= 2
        except ZeroDivisionError:
            builds = False
        raw = {"format": "awq", "duo_scaling": duo_scaling, "n_grid": n_grid}
        if builds:
            assert isinstance(parse(raw), AwqSpec), n_grid
        else:
            assert "n_grid" in error_of(raw), n_grid


def test_a_one_file_format_is_found_by_its_file(tmp_path: Path) -> None:
    """Format.file_suffix: GGUF's variants are one .gguf file, every other format's a folder."""
    from quantbench.formats.registry import all_formats, format_of_file, variant_file

    assert {n for n, f in all_formats().items() if f.file_suffix} == {"gguf"}
    found = format_of_file(tmp_path / "model-Q4_K_M.gguf")
    assert found is not None and found.name == "gguf"
    assert format_of_file(tmp_path / "model.safetensors") is None
    assert format_of_file(tmp_path / "folder") is None
    assert variant_file(tmp_path, "bf16") is None  # a folder's variant: no one file
    with pytest.raises(VariantSpecError, match="expected exactly one .gguf file, found 0"):
        variant_file(tmp_path, "gguf")
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    assert variant_file(tmp_path, "gguf") == tmp_path / "model.gguf"
