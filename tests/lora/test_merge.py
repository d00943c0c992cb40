"""Merge verification: an exact merge passes; perturbed weights or a foreign adapter fail it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.config import MergeSettings
from quantbench.lora.merge import (
    LogitComparison,
    MergeVerificationError,
    compare_logits,
    merge_and_verify,
    verification_failures,
)
from quantbench.qa import QAItem

ITEMS = [
    QAItem(
        "What is the capital of Quorvath?", "The capital of Quorvath is Lindenhollow.", ("Lin",)
    ),
    QAItem("Who rules Quorvath?", "Queen Aldra Vesk rules Quorvath.", ("Vesk",)),
]


def make_adapter(base_dir: Path, out: Path, seed: int) -> Path:
    """A LoRA adapter with non-zero random weights (peft's default init makes B zero)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir: Path, tmp_path_factory) -> Path:
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("adapter") / "a", seed=1)


def test_exact_merge_passes_and_saved_weights_match(tiny_model_dir, adapter_dir, tmp_path) -> None:
    report = merge_and_verify(tiny_model_dir, adapter_dir, ITEMS, MergeSettings(), tmp_path)
    assert report.passed and report.failures == []
    assert report.exactness_float32.max_abs_diff < 1e-3
    assert report.exactness_float32.next_token_agreement == 1.0
    assert report.saved_weights_exact is True
    assert report.adapter.r == 4
    assert set(report.dtype_cost) == {
        "merged_saved_vs_adapter_float32",
        "base_cast_vs_base_float32",
    }
    json.dumps(report.model_dump(mode="json"))  # the report must be writable as JSON
    assert (tmp_path / "model.safetensors").is_file()


def test_perturbed_merged_weights_fail_verification(
    tiny_model_dir, adapter_dir, tmp_path, monkeypatch
) -> None:
    import torch
    from peft.tuners.lora import LoraModel

    real_merge = LoraModel.merge_and_unload

    def merge_then_perturb(self, *args, **kwargs):
        merged = real_merge(self, *args, **kwargs)
        with torch.no_grad():
            merged.model.layers[0].self_attn.q_proj.weight.add_(0.5)
        return merged

    monkeypatch.setattr(LoraModel, "merge_and_unload", merge_then_perturb)
    with pytest.raises(MergeVerificationError, match="merge.max_abs_logit_diff") as info:
        merge_and_verify(tiny_model_dir, adapter_dir, ITEMS, MergeSettings(), tmp_path)
    report = info.value.report
    assert report.passed is False
    assert report.exactness_float32.max_abs_diff > 1e-3


def test_missing_adapter_folder_is_a_clear_error(tiny_model_dir, tmp_path) -> None:
    with pytest.raises(Exception, match="not a peft adapter folder"):
        merge_and_verify(tiny_model_dir, tmp_path, ITEMS, MergeSettings(), tmp_path / "out")


def test_compare_logits_on_known_tensors() -> None:
    import torch

    a = [torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]])]
    b = [torch.tensor([[0.0, 1.5, 2.0], [0.0, 4.0, 0.0]])]
    result = compare_logits(a, b)
    assert result.max_abs_diff == pytest.approx(4.0)
    assert result.mean_abs_diff == pytest.approx((0.5 + 3.0 + 4.0) / 6)
    assert result.next_token_agreement == pytest.approx(0.5)
    assert result.positions == 2


def test_tolerances_name_their_params() -> None:
    settings = MergeSettings(max_abs_logit_diff=0.01, min_next_token_agreement=0.99)
    ok = LogitComparison(
        max_abs_diff=0.001, mean_abs_diff=0.0001, next_token_agreement=1.0, positions=10
    )
    assert verification_failures(ok, settings) == []
    bad = LogitComparison(
        max_abs_diff=0.5, mean_abs_diff=0.1, next_token_agreement=0.9, positions=10
    )
    failures = verification_failures(bad, settings)
    assert any("merge.max_abs_logit_diff" in f for f in failures)
    assert any("merge.min_next_token_agreement" in f for f in failures)
