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


@pytest.mark.slow
def test_gptq_keeps_its_chatter_out_of_a_stage_log(
    tiny_model_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """GPTQModel's save printed the folder's files and both its configs (about 100 lines of a
    quantize stage's log), and its loader logged about 40 INFO lines into each evaluation of a
    GPTQ variant (the evaluate stage's worker process did not keep the stage's log quiet)."""
    from quantbench.quality import EvaluateSettings, evaluate_variant

    spec = recipe(
        {"format": "gptq", "group_size": GROUP, "calibration": {"samples": 6, "max_tokens": 128}}
    )
    built = build_variant(
        "gptq", spec, tiny_model_dir, tmp_path / "gptq", REPO / "data/calibration.txt", threads=1
    )
    written = "".join(capfd.readouterr())
    assert "Content of saved" not in written and "Files in directory" not in written
    monkeypatch.setenv("QUANTBENCH_REFERENCE_CACHE", str(tmp_path / "reference"))
    settings = EvaluateSettings(
        context_length=64, stride=32, max_tokens=128, heldout_limit=2, heldout_max_new_tokens=4
    )
    report = evaluate_variant(
        "gptq", built.directory, tiny_model_dir, REPO / "data/eval.txt",
        REPO / "data/heldout.jsonl", settings, threads=1,
    )  # fmt: skip
    assert report.heldout.total == 2
    written = "".join(capfd.readouterr())
    # what GPTQModel's loader said at INFO in the worker (stderr there is this test's file)
    assert not [line for line in written.splitlines() if "Kernel:" in line or "Loader:" in line]
