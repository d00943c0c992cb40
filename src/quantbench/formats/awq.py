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

Where it computes is chosen here, not by llm-compressor: its sequential pipeline onloads each
layer to its "main device", any accelerator torch sees, whatever the model was loaded on. So
the model is loaded onto ``runtime.device`` (the whole model on the GPU: no layer is copied
there and back per pass) and the pipeline's main device is pinned to the same for the call
(:func:`calibrating_on`); on the CPU both are the CPU, a GPU torch sees included.

CPU workaround: during the scale search llm-compressor pins cached activations in page-locked
memory for faster host-to-device copies. On a CPU-only torch there is no device and pin_memory()
raises "Cannot access accelerator device"; pinning is pointless without a GPU to copy to, so on
the CPU it is skipped for the duration of the call (and left alone on a GPU).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from quantbench.accelerator import torch_device
from quantbench.accelerator.nvidia import Device
from quantbench.formats.base import CalibrationSpec, Format, Recipe, check_group_size
from quantbench.formats.build import (
    BuildRequest,
    BuildResult,
    calibration_dtype,
    copy_tokenizer,
    hf_weights_file,
    tokenize_calibration,
)
from quantbench.formats.registry import register_format
from quantbench.native.dtype import torch_dtype
from quantbench.progress import quiet_chatty_loggers


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


# The recipe llm-compressor saves next to the weights; kept, it documents the exact modifiers.
RECIPE_FILE = "recipe.yaml"


@contextmanager
def calibrating_on(device: Device) -> Iterator[None]:
    """llm-compressor's oneshot computing on ``device``: its sequential pipeline's main device
    pinned to it (the pipeline asks torch for any accelerator otherwise), cached activations
    pinned in page-locked memory only where there is a GPU to copy them to."""
    import torch
    from llmcompressor.pipelines.cache import IntermediatesCache
    from llmcompressor.pipelines.sequential import pipeline

    main = torch.device(torch_device(device))
    originals = (pipeline.get_main_device, IntermediatesCache.pin_memory)

    def _skip(self: object, batch_index: int, input_names: list[str] | None = None) -> None:
        return None

    pipeline.get_main_device = lambda: main  # type: ignore[assignment]
    if device != "cuda":
        IntermediatesCache.pin_memory = _skip  # type: ignore[method-assign]
    try:
        yield
    finally:
        pipeline.get_main_device, IntermediatesCache.pin_memory = originals  # type: ignore[method-assign]


def compressed_weights(config: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(weights args, input-activation args) of a compressed-tensors checkpoint's first group."""
    q = (config or {}).get("quantization_config") or {}
    if str(q.get("quant_method", "")).lower() != "compressed-tensors":
        return {}, {}
    group = next(iter((q.get("config_groups") or {}).values()), {}) or {}
    return dict(group.get("weights") or {}), dict(group.get("input_activations") or {})


class Awq(Format):
    """AWQ-made (or any weight-only integer) compressed-tensors checkpoints, and AutoAWQ's."""

    name: ClassVar[str] = "awq"
    libraries: ClassVar[tuple[str, ...]] = (
        "llmcompressor",
        "compressed-tensors",
        "torch",
        "transformers",
        "safetensors",
    )
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


def load_for_calibration(merged_dir: Path, compute: str, device: Device) -> Any:
    """The merged model in ``compute``, on ``device`` whole (llm-compressor's quantizers)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch_dtype(compute))
    return model.to(torch_device(device))


def build_awq(request: BuildRequest) -> BuildResult:
    spec: AwqSpec = request.spec
    assert request.calibration is not None, "validated before: awq needs calibration"
    import torch
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier
    from transformers import AutoTokenizer

    quiet_chatty_loggers()  # llm-compressor's loguru handler is made by its import
    tokenizer = AutoTokenizer.from_pretrained(request.merged_dir)
    # calibrate in bf16 on a GPU, on the CPU in what it computes fastest (float32 where bf16 is
    # emulated: AWQ took 14 minutes in bf16 on an AVX2-only EPYC), save in bf16 as always
    compute = calibration_dtype(request.device)
    model = load_for_calibration(request.merged_dir, compute, request.device)
    rows = tokenize_calibration(tokenizer, request.calibration)
    # Already tokenized (input_ids column), so llm-compressor uses these ids as they are.
    dataset = Dataset.from_list(rows)
    weights = QuantizationArgs(
        num_bits=spec.bits,
        type="int",
        symmetric=spec.sym,
        strategy="group" if spec.group_size != -1 else "channel",
        group_size=spec.group_size if spec.group_size != -1 else None,
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=weights)
    recipe = [
        AWQModifier(duo_scaling=spec.duo_scaling, n_grid=spec.n_grid),
        QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"]),
    ]
    with calibrating_on(request.device):
        oneshot(
            model=model,
            tokenizer=tokenizer,
            dataset=dataset,
            recipe=recipe,
            num_calibration_samples=len(rows),
            max_seq_length=request.calibration.max_tokens,
            shuffle_calibration_samples=False,
        )
    if compute != "bfloat16":
        model.to(torch.bfloat16)  # the checkpoint's own dtype, whatever calibration ran in
    model.save_pretrained(request.out_dir, save_compressed=True)
    copy_tokenizer(request.merged_dir, request.out_dir)
    return BuildResult(
        hf_weights_file(request.out_dir),
        details={
            "checkpoint": "pack-quantized",
            "calibrated_in": compute,
            "calibrated_on": request.device,
        },
    )


register_format(Awq())
