"""The adopted adapter against the model, before any work (lora.adopt.adapter_fit_problems):
what peft saves fits; another model's adapter is refused naming the file, the module and the
fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from quantbench.lora.adopt import adapter_fit_problems
from quantbench.safetensors_header import read_header


@pytest.fixture(scope="module")
def adapter(tiny_model_dir: Path, tmp_path_factory) -> Path:
    """A LoRA adapter peft saves for the tiny model (q_proj and v_proj, rank 4)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8,
                                                  target_modules=["q_proj", "v_proj"]))  # fmt: skip
    out = tmp_path_factory.mktemp("adapter") / "adapter"
    peft_model.save_pretrained(out)
    return out


def _tensors(folder: Path) -> dict[str, tuple[int, ...]]:
    return {n: t.shape for n, t in read_header(folder / "model.safetensors").tensors.items()}


def test_what_peft_saves_fits_its_model(adapter: Path, tiny_model_dir: Path) -> None:
    assert adapter_fit_problems(adapter, _tensors(tiny_model_dir), None) == []
    assert adapter_fit_problems(adapter, None, None) == []  # the model not here yet: names only


def test_an_adapter_of_other_widths_or_rank_is_refused_before_any_work(
    adapter: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Only adapter_config.json's existence was checked: the mismatch surfaced in the finetune
    stage, after the base model had loaded and answered every held-out question."""
    wider = {
        n: (s[0] * 2, s[1] * 2) if len(s) == 2 else s for n, s in _tensors(tiny_model_dir).items()
    }
    (problem,) = adapter_fit_problems(adapter, wider, None)
    assert problem.startswith(f"lora.adapter_path: {adapter}: base_model.model.model.layers.0")
    assert "lora_A.weight is 4 x 64" in problem and "takes 128 in" in problem
    assert "give an adapter trained on this model, or set lora.train: true" in problem
    other = tmp_path / "adapter"
    shutil.copytree(adapter, other)
    config = json.loads((other / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**config, "r": 8}))
    (problem,) = adapter_fit_problems(other, _tensors(tiny_model_dir), None)
    assert "has rank 4, and adapter_config.json says r = 8" in problem


def test_an_adapter_trained_on_another_named_model_is_refused(adapter: Path, tmp_path) -> None:
    other = tmp_path / "adapter"
    shutil.copytree(adapter, other)
    config = json.loads((other / "adapter_config.json").read_text())
    for base, fits in (("HuggingFaceTB/SmolLM2-135M", False), ("HuggingFaceTB/SmolLM2-135M-Instruct",
                       True), ("models/base", True), (None, True)):  # fmt: skip
        (other / "adapter_config.json").write_text(
            json.dumps({**config, "base_model_name_or_path": base})
        )
        found = adapter_fit_problems(other, None, "SmolLM2-135M-Instruct")
        assert (found == []) == fits, (base, found)
        if not fits:
            assert "was trained on HuggingFaceTB/SmolLM2-135M" in found[0]
