"""A format defined outside src/: the merged model cast to float16 by transformers.

params.yaml names this file under `plugins:`; importing it registers the `fp16` format, whose
variants (`variants: {fp16: {format: fp16}}`) are built, evaluated, estimated, served (by an
engine that declares `fp16`, e.g. tests/engines/plugin_engine.py's `echo`, and by transformers,
which this module adds it to) and reported like a built-in format's. tests/test_plugins_under_dvc.py runs it through `dvc repro`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.engines.registry import also_serves
from quantbench.formats.base import Format, Recipe
from quantbench.formats.build import BuildRequest, BuildResult, hf_weights_file
from quantbench.formats.registry import register_format


class Fp16Spec(Recipe):
    format: Literal["fp16"] = Field(description="The merged model cast to float16.")


class Fp16(Format):
    name: ClassVar[str] = "fp16"
    libraries: ClassVar[tuple[str, ...]] = ("transformers", "safetensors")
    recipe_model: ClassVar[type[Recipe]] = Fp16Spec

    def build(self, request: BuildRequest) -> BuildResult:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(request.merged_dir, dtype=torch.float16)
        model.save_pretrained(request.out_dir)
        AutoTokenizer.from_pretrained(request.merged_dir).save_pretrained(request.out_dir)
        return BuildResult(hf_weights_file(request.out_dir), details={"method": "cast to float16"})

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        dtype = (config or {}).get("dtype") or (config or {}).get("torch_dtype")
        return config is not None and not config.get("quantization_config") and dtype == "float16"

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        return {"format": "fp16"}  # dense, two bytes a weight: a layout the estimator knows


register_format(Fp16())
# an HF checkpoint transformers loads as it is: served by the built-in engine too, said here (no
# engine module edited)
also_serves("transformers", Fp16.name)
