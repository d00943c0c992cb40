"""params.yaml `lora:` (train or adopt an adapter) and `merge:` (save and verify the merge)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from quantbench.settings import Settings


class LoraSettings(Settings):
    train: bool = Field(True, description="Train an adapter (true) or use `adapter_path` (false).")
    adapter_path: Path | None = Field(
        None, description="An existing peft LoRA adapter folder, used when train is false."
    )
    r: int = Field(16, ge=1, le=1024, description="LoRA rank.")
    alpha: float = Field(32.0, gt=0, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout during training.")
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Module names that get adapters.",
    )
    steps: int = Field(40, ge=1, description="Optimizer steps.")
    batch_size: int = Field(8, ge=1, description="Chats per step.")
    learning_rate: float = Field(2e-3, gt=0, lt=1, description="AdamW learning rate.")
    max_length: int = Field(128, ge=16, description="Token limit per training chat.")
    answer_max_new_tokens: int = Field(
        32, ge=1, description="Greedy tokens generated per held-out question."
    )
    heldout_limit: int | None = Field(
        None,
        ge=1,
        description="Score the adapter on only the first N held-out questions, before and after "
        "training (null: all of them; evaluate.heldout_limit is the variants' own).",
    )

    @model_validator(mode="after")
    def _adapter_when_not_training(self) -> LoraSettings:
        if not self.train and self.adapter_path is None:
            raise ValueError(
                "lora.train is false but lora.adapter_path is not set: "
                "name an adapter folder or set lora.train: true"
            )
        return self


class MergeSettings(Settings):
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="Dtype the merged model is saved in."
    )
    max_abs_logit_diff: float = Field(
        1e-3,
        gt=0,
        description="Largest |logit| difference allowed between the adapter model and the "
        "merged model, both in float32 (a correct merge gives ~1e-4).",
    )
    min_next_token_agreement: float = Field(
        1.0, ge=0, le=1, description="Share of positions where both pick the same next token."
    )
    probe_limit: int | None = Field(
        16,
        ge=1,
        description="Compare the models on only the first N held-out question + answer chats "
        "(null: all of them). Each chat is run through five models (base twice, adapter, merge, "
        "the saved file): on one core of an AVX2-only EPYC 13 took 45 of the stage's 65 s, so "
        "all 253 shipped questions would take 14 minutes to show what 16 show: a merge is exact "
        "on every input or on none (the fact questions and three ticket codes by default).",
    )
