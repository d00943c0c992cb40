"""What a variant is: its format and recipe, as written under `variants:` in params.yaml.

Each variant is keyed by a name chosen once (`gptq-w4g64`, `gguf-q4_k_m`, ...) and holds a
`format` that picks one of the recipe models below (a pydantic discriminated union), so a key that
does not belong to that format, a bit width the library cannot write or an unknown GGUF type is an
error when params.yaml is loaded, before any model is touched. Checks that need the model's shapes
(a group size must divide every quantized layer's input width) run in `validate_against_model`,
still before the quantizer starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from quantbench.errors import UserError

# llama.cpp file types that `llama_model_quantize` writes from an F16/BF16/F32 GGUF without an
# importance matrix, by their upstream names (`llama-quantize --help`). The IQ1/IQ2/IQ3 types and
# Q2_K_S need an imatrix; the ternary TQ types and MXFP4/NVFP4 are for models trained for them.
GGUF_TYPES: tuple[str, ...] = (
    "F16",
    "BF16",
    "Q8_0",
    "Q6_K",
    "Q5_K_M",
    "Q5_K_S",
    "Q5_1",
    "Q5_0",
    "Q4_K_M",
    "Q4_K_S",
    "Q4_1",
    "Q4_0",
    "IQ4_NL",
    "IQ4_XS",
    "Q3_K_L",
    "Q3_K_M",
    "Q3_K_S",
    "Q2_K",
)

# Types that the converter writes itself: no quantize step after conversion.
GGUF_CONVERTER_TYPES = {"F16": "f16", "BF16": "bf16"}


class VariantSpecError(UserError, ValueError):
    """A variant's recipe cannot work (bad value, or it does not fit the model)."""


class Recipe(BaseModel):
    """Base for every format's recipe: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class CalibrationSpec(Recipe):
    """How much of the calibration text a calibrating quantizer sees."""

    samples: int | None = Field(
        None,
        ge=1,
        description="Use the first N passages of the calibration file (split at blank lines); "
        "null uses all of them. File order, no shuffling, so runs repeat exactly.",
    )
    max_tokens: int = Field(
        512,
        ge=16,
        le=32768,
        description="Token limit per calibration passage (longer ones are cut).",
    )


class Bf16Spec(Recipe):
    """The unquantized baseline: a byte-exact copy of the merged model's files."""

    format: Literal["bf16"] = Field(description="Unquantized copy of the merged bf16 model.")


class GptqSpec(Recipe):
    """GPTQ weight-only quantization with GPTQModel (writes the 'gptq' v1 checkpoint format)."""

    format: Literal["gptq"] = Field(description="GPTQ with GPTQModel.")
    bits: Literal[2, 3, 4, 8] = Field(4, description="Weight bits.")
    group_size: int = Field(
        64,
        description="Input columns that share one scale/zero point; -1 is one group per row. "
        "Must divide hidden_size and intermediate_size.",
    )
    sym: bool = Field(True, description="Symmetric quantization (no zero point).")
    desc_act: bool = Field(
        False,
        description="Quantize columns in order of decreasing activation (act-order). Better "
        "accuracy, slower kernels; off matches what most serving kernels expect.",
    )
    damp_percent: float = Field(
        0.05, gt=0, lt=1, description="Hessian dampening, as a fraction of its mean diagonal."
    )
    calibration: CalibrationSpec = Field(
        CalibrationSpec(), description="Calibration passages used for the Hessians."
    )

    @field_validator("group_size")
    @classmethod
    def _group_size_allowed(cls, value: int) -> int:
        return _check_group_size(value)


class AwqSpec(Recipe):
    """AWQ (activation-aware scaling + int4 weights) with llm-compressor (compressed-tensors)."""

    format: Literal["awq"] = Field(description="AWQ with llm-compressor.")
    bits: Literal[4, 8] = Field(4, description="Weight bits (int4 or int8, weight-only).")
    group_size: int = Field(
        64,
        description="Input columns that share one scale/zero point; -1 is one group per row. "
        "Must divide hidden_size and intermediate_size.",
    )
    sym: bool = Field(
        False, description="Symmetric quantization; AWQ's own recipe is asymmetric (zero points)."
    )
    duo_scaling: bool = Field(
        True, description="Search scales from both activations and weights (AWQ's default)."
    )
    calibration: CalibrationSpec = Field(
        CalibrationSpec(), description="Calibration passages used for the activation statistics."
    )

    @field_validator("group_size")
    @classmethod
    def _group_size_allowed(cls, value: int) -> int:
        return _check_group_size(value)


class GgufSpec(Recipe):
    """llama.cpp GGUF: convert the merged model (F16 by default), then quantize to `type`."""

    format: Literal["gguf"] = Field(description="GGUF with llama.cpp's converter and quantizer.")
    type: str = Field(description=f"llama.cpp file type, one of: {', '.join(GGUF_TYPES)}.")
    intermediate: Literal["f16", "bf16", "f32"] = Field(
        "f16",
        description="Type the converter writes before quantizing (llama.cpp's usual path is f16; "
        "bf16 is exact for a bf16 model).",
    )

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: Any) -> str:
        text = str(value).strip().upper()
        if text not in GGUF_TYPES:
            raise ValueError(f"unknown GGUF type {value!r}; allowed: {', '.join(GGUF_TYPES)}")
        return text

    @model_validator(mode="after")
    def _converter_type_matches(self) -> GgufSpec:
        direct = GGUF_CONVERTER_TYPES.get(self.type)
        if direct is not None and direct != self.intermediate:
            # F16/BF16 are written by the converter itself; a different intermediate would mean
            # a lossy round trip through another float format.
            raise ValueError(
                f"type {self.type} is written by the converter directly; set intermediate: "
                f"{direct} (or leave it out)"
            )
        return self


VariantSpec = Annotated[Bf16Spec | GptqSpec | AwqSpec | GgufSpec, Field(discriminator="format")]
FORMATS: tuple[str, ...] = ("bf16", "gptq", "awq", "gguf")


def _check_group_size(value: int) -> int:
    if value == -1 or (value >= 16 and value & (value - 1) == 0):
        return value
    raise ValueError(
        f"group_size must be -1 or a power of two >= 16 (32, 64, 128, ...), got {value}"
    )


def needs_calibration(spec: Any) -> bool:
    """Whether the recipe reads the calibration text."""
    return isinstance(spec, GptqSpec | AwqSpec)


def validate_name(name: str) -> str:
    """Variant names become folder and DVC stage names: keep them to a safe alphabet."""
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", name):
        raise VariantSpecError(
            f"variant name {name!r}: use 1-64 lowercase letters, digits, '.', '_' or '-' "
            "(it names a folder and a DVC stage)"
        )
    return name


def quantized_widths(arch: Any) -> dict[str, int]:
    """Input widths of the linear layers a weight-only quantizer groups along."""
    return {"hidden_size": int(arch.hidden_size), "intermediate_size": int(arch.intermediate_size)}


def divisors_hint(widths: dict[str, int], group_size: int) -> str:
    """Group sizes that would work for these widths, to put in the error message."""
    options = [g for g in (16, 32, 64, 128, 256) if all(w % g == 0 for w in widths.values())]
    shown = ", ".join(str(g) for g in options) if options else "none of 16..256"
    return f"allowed here: -1, {shown}"


def validate_against_model(name: str, spec: Any, arch: Any) -> None:
    """Checks that need the model: a group size must divide every grouped layer width.

    `arch` is anything with `hidden_size` and `intermediate_size` (quantbench.model.Architecture
    or a transformers config).
    """
    group_size = getattr(spec, "group_size", None)
    if group_size is None or group_size == -1:
        return
    widths = quantized_widths(arch)
    bad = {key: width for key, width in widths.items() if width % group_size}
    if bad:
        shown = ", ".join(f"{key}={width}" for key, width in bad.items())
        raise VariantSpecError(
            f"variant {name!r}: variants.{name}.group_size={group_size} does not divide the "
            f"model's {shown}; {divisors_hint(widths, group_size)}"
        )


def check_calibration_file(name: str, spec: Any, path: Path | None) -> None:
    """A calibrating recipe needs its calibration text to exist and hold at least one passage."""
    if not needs_calibration(spec):
        return
    if path is None or not Path(path).is_file():
        raise VariantSpecError(
            f"variant {name!r} (format {spec.format}) needs calibration text, but the "
            f"calibration file {str(path)!r} does not exist; set data.calibration in params.yaml "
            "to a UTF-8 text file of passages separated by blank lines"
        )
