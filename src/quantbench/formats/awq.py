"""AWQ with llm-compressor (vLLM project), the successor AutoAWQ's README names.

AWQ here is two modifiers in one oneshot pass: AWQModifier searches per-channel scales from
activation statistics and folds them into the preceding norms/linears (a pure transform), then
QuantizationModifier rounds the scaled weights to int4 groups. The checkpoint is
compressed-tensors "pack-quantized": vLLM's native format, and one transformers loads through
its compressed-tensors integration. lm_head stays in bf16 (it is tied to the embeddings here).

Why llm-compressor and not GPTQModel's AWQ mode: the GPTQ variant already exercises GPTQModel and
the gptq format; llm-compressor writes the checkpoint format vLLM maintains itself, so the two
4-bit variants cover both families a vLLM deployment meets, and the comparison is AWQ-the-method
vs GPTQ-the-method from their reference toolchains.

How llm-compressor is run (on ``runtime.device``, with its CPU workaround) is
:mod:`quantbench.formats.compressor`'s, shared with the w8a8 format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from quantbench.formats.base import CalibrationSpec, Format, Recipe, check_group_size
from quantbench.formats.build import BuildRequest, BuildResult
from quantbench.formats.compressor import LIBRARIES, compress, compressed_weights
from quantbench.formats.registry import register_format


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
    n_grid: int = Field(
        20,
        ge=2,
        le=100,
        description="Scale ratios the search tries per layer (llm-compressor's default, 20): the "
        "stage's time is about proportional to it (CI uses fewer; the recipe records it). At "
        "least 3 with duo_scaling (identity plus a grid from 0 to 1), 2 without.",
    )
    calibration: CalibrationSpec = Field(
        CalibrationSpec(), description="Calibration passages used for the activation statistics."
    )

    @field_validator("group_size")
    @classmethod
    def _group_size_allowed(cls, value: int) -> int:
        return check_group_size(value)

    @model_validator(mode="after")
    def _grid_has_two_ends(self) -> AwqSpec:
        # llm-compressor spaces its ratios as i / (n - 1), and with duo scaling as identity plus
        # i / (n - 2): a smaller grid divides by zero minutes into the stage, after calibration
        least = 3 if self.duo_scaling else 2
        if self.n_grid < least:
            raise ValueError(
                f"n_grid {self.n_grid} is too small: the scale search needs at least {least} "
                f"ratios {'with' if self.duo_scaling else 'without'} duo_scaling (identity and "
                f"a grid from 0 to 1); set n_grid to {least} or more"
            )
        return self


class Awq(Format):
    """AWQ-made (or any weight-only integer) compressed-tensors checkpoints, and AutoAWQ's."""

    name: ClassVar[str] = "awq"
    libraries: ClassVar[tuple[str, ...]] = LIBRARIES
    recipe_model: ClassVar[type[Recipe]] = AwqSpec

    def build(self, request: BuildRequest) -> BuildResult:
        return build_awq(request)

    def needs_calibration(self, recipe: Recipe) -> bool:
        return True

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        q = (config or {}).get("quantization_config") or {}
        if str(q.get("quant_method", "")).lower() == "awq":
            return True
        weights, activations = compressed_weights(config)
        return bool(weights) and weights.get("type", "int") == "int" and not activations

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        if isinstance(recipe, AwqSpec):
            bits, group, sym = recipe.bits, recipe.group_size, recipe.sym
        else:
            q = (config or {}).get("quantization_config") or {}
            weights, _ = compressed_weights(config)
            if weights:
                bits = weights.get("num_bits", 4)
                group = weights.get("group_size") or -1
                sym = weights.get("symmetric", False)
            else:  # AutoAWQ's own format
                bits = q.get("bits", q.get("w_bit", 4))
                group = q.get("group_size", q.get("q_group_size", 128))
                sym = not q.get("zero_point", True)
        return {"format": "awq", "bits": bits, "group_size": group, "sym": sym}


def recipe_modifiers(spec: AwqSpec) -> list[Any]:
    """The llm-compressor modifiers of ``spec``: the scale search, then int weight rounding."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier

    weights = QuantizationArgs(
        num_bits=spec.bits,
        type="int",
        symmetric=spec.sym,
        strategy="group" if spec.group_size != -1 else "channel",
        group_size=spec.group_size if spec.group_size != -1 else None,
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=weights)
    return [
        AWQModifier(duo_scaling=spec.duo_scaling, n_grid=spec.n_grid),
        QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"]),
    ]


def build_awq(request: BuildRequest) -> BuildResult:
    spec: AwqSpec = request.spec
    return compress(
        request, lambda: recipe_modifiers(spec), details={"checkpoint": "pack-quantized"}
    )


register_format(Awq())
