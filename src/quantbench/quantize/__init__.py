"""Quantized variants of the merged model, one folder each, made by their format's quantizer.

`build_variant(name, spec, merged_dir, out_dir, calibration_path, threads)` validates the recipe
against the model, runs the format's quantizer (`quantbench.formats.<format>`) and writes
`variant.json` beside the weights.
"""

from quantbench.quantize.build import build_variant, check_calibration_file, validate_variant
from quantbench.quantize.variant import VariantInfo, read_variant

__all__ = [
    "VariantInfo",
    "build_variant",
    "check_calibration_file",
    "read_variant",
    "validate_variant",
]
