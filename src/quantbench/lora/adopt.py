"""Adopt an existing peft LoRA adapter instead of training one: check it, copy it, measure it."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from quantbench.chat import hf_answers_fn
from quantbench.errors import UserError
from quantbench.lora.merge import adapter_provenance
from quantbench.lora.spec import LoraSettings
from quantbench.lora.train import load_for_training
from quantbench.qa import QAItem, score
from quantbench.schemas.common import HeldoutScore
from quantbench.schemas.finetune import FinetuneReport

log = logging.getLogger(__name__)


def adopt_adapter(
    base_dir: Path, adapter_dir: Path, heldout: list[QAItem], settings: LoraSettings, out_dir: Path
) -> FinetuneReport:
    """Copy a given adapter into out_dir and report held-out accuracy without and with it."""
    from peft import PeftModel

    if not adapter_dir.is_dir():
        raise UserError(
            f"lora.adapter_path: {adapter_dir} is not a folder; give a peft adapter folder "
            "(adapter_config.json + adapter_model.safetensors) or set lora.train: true"
        )
    provenance = adapter_provenance(adapter_dir)
    if provenance.peft_type != "LORA":
        raise UserError(
            f"lora.adapter_path: {adapter_dir} holds a {provenance.peft_type} adapter; "
            "only LoRA adapters can be merged"
        )
    model, tokenizer = load_for_training(base_dir)
    model.eval()
    before = score(heldout, hf_answers_fn(model, tokenizer, settings.answer_max_new_tokens))
    try:
        adapted = PeftModel.from_pretrained(model, adapter_dir)
    except Exception as exc:  # peft raises several types for a shape or key mismatch
        raise UserError(
            f"lora.adapter_path: the adapter in {adapter_dir} does not fit the base model "
            f"({type(exc).__name__}: {exc}); was it trained on another base?"
        ) from None
    adapted.eval()
    after = score(heldout, hf_answers_fn(adapted, tokenizer, settings.answer_max_new_tokens))
    log.info(
        "held-out accuracy: %d/%d without, %d/%d with the adapter",
        before.correct,
        before.total,
        after.correct,
        after.total,
    )
    shutil.copytree(adapter_dir, out_dir, dirs_exist_ok=True)
    return FinetuneReport(
        trained=False,
        adapter=provenance,
        accuracy_before=before.accuracy,
        accuracy_after=after.accuracy,
        heldout_before=HeldoutScore.model_validate(before.to_dict()),
        heldout_after=HeldoutScore.model_validate(after.to_dict()),
        params=settings.model_dump(mode="json"),
    )
