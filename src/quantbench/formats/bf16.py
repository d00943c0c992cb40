"""bf16: the unquantized baseline, the merged model's own files byte for byte.

Every delta in the quality reports is measured against this variant in the same harness, so it
must be the merged model and nothing else. A merged model saved in another dtype is cast to
bfloat16 with transformers instead (safetensors output is deterministic).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.formats.base import Format, Recipe
from quantbench.formats.build import (
    BuildRequest,
    BuildResult,
    copy_file,
    hf_weights_file,
)
from quantbench.formats.registry import register_format
from quantbench.hfconfig import read_hf_config

WEIGHT_SUFFIXES = (".safetensors", ".json", ".jinja", ".txt", ".model")
_DTYPE_FORMATS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


class Bf16Spec(Recipe):
    """The unquantized baseline: a byte-exact copy of the merged model's files."""

    format: Literal["bf16"] = Field(description="Unquantized copy of the merged bf16 model.")


class Bf16(Format):
    name: ClassVar[str] = "bf16"
    libraries: ClassVar[tuple[str, ...]] = ("safetensors",)
    recipe_model: ClassVar[type[Recipe]] = Bf16Spec

    def build(self, request: BuildRequest) -> BuildResult:
        config = read_hf_config(request.merged_dir)
        dtype = config.get("dtype") or config.get("torch_dtype")
        if dtype == "bfloat16":
            for src in sorted(request.merged_dir.iterdir()):
                if src.is_file() and not src.name.startswith(".") and src.suffix in WEIGHT_SUFFIXES:
                    copy_file(src, request.out_dir / src.name)
            return BuildResult(hf_weights_file(request.out_dir), details={"method": "copy"})
        return _cast(request, str(dtype))

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        return config is not None and not config.get("quantization_config")

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        if recipe is not None:
            return {"format": "bf16"}
        dtype = str((config or {}).get("dtype") or (config or {}).get("torch_dtype") or "bfloat16")
        return {"format": _DTYPE_FORMATS.get(dtype.removeprefix("torch."), "bf16")}


def _cast(request: BuildRequest, dtype: str) -> BuildResult:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(request.merged_dir, dtype=torch.bfloat16)
    model.save_pretrained(request.out_dir)
    AutoTokenizer.from_pretrained(request.merged_dir).save_pretrained(request.out_dir)
    return BuildResult(hf_weights_file(request.out_dir), details={"method": f"cast from {dtype}"})


register_format(Bf16())
