"""Quantized variants of the merged model: bf16 copy, GPTQ, AWQ and GGUF, one folder each.

`build_variant(name, spec, merged_dir, out_dir, calibration_path, threads)` validates the recipe
against the model, runs the format's quantizer and writes `variant.json` beside the weights.
"""

from quantbench.quantize.registry import build_variant, validate_variant
from quantbench.quantize.spec import (
    FORMATS,
    GGUF_TYPES,
    AwqSpec,
    Bf16Spec,
    CalibrationSpec,
    GgufSpec,
    GptqSpec,
    VariantSpec,
    VariantSpecError,
    validate_against_model,
)
from quantbench.quantize.variant import VariantInfo, read_variant

__all__ = [
    "FORMATS",
    "GGUF_TYPES",
    "AwqSpec",
    "Bf16Spec",
    "CalibrationSpec",
    "GgufSpec",
    "GptqSpec",
    "VariantInfo",
    "VariantSpec",
    "VariantSpecError",
    "build_variant",
    "read_variant",
    "validate_against_model",
    "validate_variant",
]
