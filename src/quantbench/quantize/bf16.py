"""The bf16 baseline: the merged model's own files, byte for byte.

Every delta in the quality reports is measured against this variant in the same harness, so it
must be the merged model and nothing else. A merged model saved in another dtype is cast to
bfloat16 with transformers instead (safetensors output is deterministic).
"""

from __future__ import annotations

from quantbench.quantize.common import (
    BuildRequest,
    BuildResult,
    copy_file,
    hf_weights_file,
    read_hf_config,
)

WEIGHT_SUFFIXES = (".safetensors", ".json", ".jinja", ".txt", ".model")


def build_bf16(request: BuildRequest) -> BuildResult:
    config = read_hf_config(request.merged_dir)
    dtype = config.get("dtype") or config.get("torch_dtype")
    if dtype == "bfloat16":
        for src in sorted(request.merged_dir.iterdir()):
            if src.is_file() and not src.name.startswith(".") and src.suffix in WEIGHT_SUFFIXES:
                copy_file(src, request.out_dir / src.name)
        return BuildResult(hf_weights_file(request.out_dir), details={"method": "copy"})
    return _cast(request, str(dtype))


def _cast(request: BuildRequest, dtype: str) -> BuildResult:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(request.merged_dir, dtype=torch.bfloat16)
    model.save_pretrained(request.out_dir)
    AutoTokenizer.from_pretrained(request.merged_dir).save_pretrained(request.out_dir)
    return BuildResult(hf_weights_file(request.out_dir), details={"method": f"cast from {dtype}"})
