"""rtn: round-to-nearest, the naive baseline every calibrated method is measured against.

Each linear layer of the decoder blocks (the modules GPTQ and AWQ quantize: attention and MLP
projections, neither the embeddings nor the LM head) is rounded to a ``bits``-bit grid per group
of ``group_size`` input columns, with no calibration and no error feedback:

- ``sym``: scale max|w| / (2^(bits-1) - 1), integers in [-2^(bits-1), 2^(bits-1) - 1], no zero
  point (4 bits: max|w| / 7 over -8..7);
- asymmetric: scale (max - min) / (2^bits - 1) and an integer zero point, integers in
  [0, 2^bits - 1] (the min/max grid AWQ's asymmetric checkpoints use).

The weights are stored dequantized, in bf16 (each level times its scale, to bf16's relative
2^-9: far below the grid's own step), so the variant is a quality reference: it shows what GPTQ and AWQ gain over naive rounding at the same bits, in the
same harness. No engine serves it as a quantized model (its bytes are bf16's), so it has no
bench pair. Pure torch, deterministic, seconds on the embedded model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from quantbench.formats.base import Format, Recipe, check_group_size
from quantbench.formats.build import BuildRequest, BuildResult, copy_tokenizer, hf_weights_file
from quantbench.formats.registry import register_format

# written beside the weights: what tells an rtn folder from a bf16 one on disk (``matches``)
MARKER = "rtn_quantization.json"


class RtnSpec(Recipe):
    """Round-to-nearest weights on a grid of ``bits`` bits per group, stored dequantized."""

    format: Literal["rtn"] = Field(description="Round-to-nearest, the uncalibrated baseline.")
    bits: Literal[2, 3, 4, 8] = Field(4, description="Weight bits.")
    group_size: int = Field(
        64,
        description="Input columns that share one scale (and zero point); -1 is one group per "
        "row. Must divide hidden_size and intermediate_size.",
    )
    sym: bool = Field(
        True, description="Symmetric grid (GPTQ's default); false: min/max with a zero point."
    )

    @field_validator("group_size")
    @classmethod
    def _group_size_allowed(cls, value: int) -> int:
        return check_group_size(value)


def round_to_nearest(weight: Any, bits: int, group_size: int, sym: bool) -> Any:
    """``weight`` (out x in) rounded to the grid per group of input columns, dequantized, in
    float32."""
    import torch

    w = weight.detach().to(torch.float32)
    rows, cols = w.shape
    size = cols if group_size == -1 else group_size
    if cols % size:
        raise ValueError(f"group size {size} does not divide the {cols} input columns")
    groups = w.reshape(rows, cols // size, size)
    if sym:
        top = 2 ** (bits - 1) - 1
        scale = groups.abs().amax(dim=-1, keepdim=True) / top
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = torch.clamp(torch.round(groups / scale), -top - 1, top)
        out = q * scale
    else:
        top = 2**bits - 1
        low = groups.amin(dim=-1, keepdim=True)
        high = groups.amax(dim=-1, keepdim=True)
        scale = (high - low) / top
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        zero = torch.round(-low / scale)
        q = torch.clamp(torch.round(groups / scale) + zero, 0, top)
        out = (q - zero) * scale
    return out.reshape(rows, cols)


def quantized_linears(model: Any) -> list[tuple[str, Any]]:
    """The linear layers inside the decoder blocks, by name (what GPTQ and AWQ quantize)."""
    import torch

    blocks = model.get_decoder().layers
    return [
        (f"model.layers.{i}.{name}", module)
        for i, block in enumerate(blocks)
        for name, module in block.named_modules()
        if isinstance(module, torch.nn.Linear)
    ]


class Rtn(Format):
    name: ClassVar[str] = "rtn"
    libraries: ClassVar[tuple[str, ...]] = ("torch", "transformers", "safetensors")
    recipe_model: ClassVar[type[Recipe]] = RtnSpec

    def build(self, request: BuildRequest) -> BuildResult:
        import torch
        from transformers import AutoModelForCausalLM

        spec: RtnSpec = request.spec
        model = AutoModelForCausalLM.from_pretrained(request.merged_dir, dtype=torch.bfloat16)
        linears = quantized_linears(model)
        with torch.no_grad():
            for _, module in linears:
                rounded = round_to_nearest(module.weight, spec.bits, spec.group_size, spec.sym)
                module.weight.copy_(rounded.to(module.weight.dtype))
        model.save_pretrained(request.out_dir)
        copy_tokenizer(request.merged_dir, request.out_dir)
        grid = "symmetric, max|w|" if spec.sym else "asymmetric, min/max with a zero point"
        details = {
            "method": f"round-to-nearest, {spec.bits} bits, group {spec.group_size}, {grid}",
            "quantized_linears": len(linears),
            "stored": "dequantized, bf16",
        }
        (request.out_dir / MARKER).write_text(
            json.dumps({**spec.model_dump(mode="json"), **details}, indent=2, sort_keys=True) + "\n"
        )
        return BuildResult(hf_weights_file(request.out_dir), details=details)

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        return config is not None and (Path(folder) / MARKER).is_file()

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        return {"format": "bf16"}  # stored dequantized: the estimator counts bf16 bytes


register_format(Rtn())
