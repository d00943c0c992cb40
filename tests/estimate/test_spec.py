"""Settings validation: defaults per format, and errors that name the value."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas.estimate_inputs import EstimatedVariant, EstimateWorkload


def test_group_quant_defaults():
    gptq = EstimatedVariant(format="gptq")
    assert (gptq.bits, gptq.group_size, gptq.sym, gptq.name) == (4, 128, True, "gptq-w4g128-sym")
    awq = EstimatedVariant(format="awq")
    assert (awq.bits, awq.group_size, awq.sym) == (4, 64, False)


def test_gguf_type_is_normalised_and_checked():
    assert EstimatedVariant(format="gguf", gguf_type="q4_k_m").gguf_type == "Q4_K_M"
    with pytest.raises(ValidationError, match="'Q4_K_X' is not known"):
        EstimatedVariant(format="gguf", gguf_type="q4_k_x")
    with pytest.raises(ValidationError, match="needs gguf_type"):
        EstimatedVariant(format="gguf")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"format": "gptq", "bits": 5}, "bits=5 is not allowed"),
        ({"format": "awq", "group_size": 0}, "group_size=0"),
        ({"format": "bf16", "bits": 4}, "bits does not apply to format bf16"),
        ({"format": "gptq", "gguf_type": "Q4_0"}, "only applies to format gguf"),
        ({"format": "int4"}, "format"),
        ({"format": "bf16", "colour": "red"}, "colour"),
    ],
)
def test_bad_variants_are_named(fields, message):
    with pytest.raises(ValidationError, match=message):
        EstimatedVariant.model_validate(fields)


def test_workload_concurrency_sorted_and_positive():
    assert EstimateWorkload(concurrency=[4, 1, 4, 2]).concurrency == [1, 2, 4]
    with pytest.raises(ValidationError, match=r"\[0\] must be >= 1"):
        EstimateWorkload(concurrency=[0, 1])


def test_settings_check_hardware_and_kv_dtype():
    settings = EstimateSettings.model_validate(
        {"hardware": ["this", "h100", "saved.json"], "kv_cache_dtype": "q8_0"}
    )
    assert settings.hardware == ["this", "h100", "saved.json"]
    with pytest.raises(ValidationError, match="'TPU9' is not known"):
        EstimateSettings(hardware=["TPU9"])
    with pytest.raises(ValidationError, match="'int3' is not supported"):
        EstimateSettings(kv_cache_dtype="int3")
    with pytest.raises(ValidationError, match="memory_utilization"):
        EstimateSettings(memory_utilization=1.5)
    with pytest.raises(ValidationError, match="engine 'tgi' is not known"):
        EstimateSettings(engine="tgi")
