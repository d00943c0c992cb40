"""GPTQ evaluated on its exactly dequantized weights (quantbench.formats.gptq.dense_weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.formats.registry import get_format, recipe
from quantbench.quantize import build_variant

REPO = Path(__file__).resolve().parents[2]
GROUP = 32


@pytest.mark.slow
def test_the_evaluation_runs_gptq_on_its_exact_dequantized_weights(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import torch
    from gptqmodel import GPTQModel
    from gptqmodel.nn_modules.qlinear import BaseQuantLinear
    from safetensors import safe_open

    spec = recipe(
        {"format": "gptq", "group_size": GROUP, "calibration": {"samples": 6, "max_tokens": 128}}
    )
    built = build_variant(
        "gptq", spec, tiny_model_dir, tmp_path / "gptq", REPO / "data/calibration.txt", threads=1
    )
    dense = get_format("gptq").load_hf_model(built.directory, torch.float32)
    # no packed module left: the evaluation runs plain float products
    assert not [n for n, m in dense.named_modules() if isinstance(m, BaseQuantLinear)]
    layers = dense.model.layers
    linears = {n: m for n, m in layers.named_modules() if isinstance(m, torch.nn.Linear)}
    assert len(linears) == 2 * 7 and all(m.weight.dtype == torch.float32 for m in linears.values())
    # exact: every weight is a whole multiple of its group's scale as the checkpoint stores it
    # (GPTQModel's CPU kernel rounds the weights to bf16, which breaks this)
    with safe_open(str(built.directory / "model.safetensors"), "pt") as f:
        for name, module in linears.items():
            scales = f.get_tensor(f"model.layers.{name}.scales").float()  # (groups, out)
            per_input = scales.repeat_interleave(GROUP, dim=0).T  # (out, in)
            codes = module.weight / per_input
            assert torch.equal(codes, codes.round()), name
            assert codes.abs().max() <= 15
    # and the same model as GPTQModel's kernel computes it, to its bf16 rounding
    kernel = GPTQModel.load(str(built.directory), device="cpu", dtype=torch.float32).model
    ids = torch.tensor([list(range(5, 45))])
    with torch.inference_mode():
        a = dense(input_ids=ids).logits
        b = kernel(input_ids=ids).logits
    assert torch.allclose(a, b, atol=0.05, rtol=0.02), (a - b).abs().max()
