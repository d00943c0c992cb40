"""Parts that more than one stage output holds: held-out scores and an adapter's provenance."""

from __future__ import annotations

from pydantic import Field

from quantbench.schemas.base import Strict


class HeldoutAnswer(Strict):
    """One held-out question, the answer expected, the model's answer and the verdict."""

    question: str
    expected: str = Field(description="The reference answer from the held-out file.")
    got: str = Field(description="The model's greedy answer, as decoded.")
    ok: bool = Field(description="Whether an accepted string appears in the answer.")


class HeldoutScore(Strict):
    """Accuracy over the held-out questions, with every answer (quantbench.qa.QAResult)."""

    accuracy: float = Field(description="correct / total (0 when there are no questions).")
    correct: int
    total: int
    answers: list[HeldoutAnswer]


class AdapterProvenance(Strict):
    """A peft adapter folder: its hash and the LoRA settings in its adapter_config.json."""

    path: str = Field(description="The adapter folder as given.")
    sha256: str = Field(description="One hash over every file of the folder (fsutil.sha256_tree).")
    peft_type: str | None
    r: int | None = Field(description="LoRA rank.")
    lora_alpha: float | None
    target_modules: list[str] = Field(description="Sorted module names that carry adapters.")
    base_model_name_or_path: str | None = Field(
        description="The base the adapter names (models/base when trained here)."
    )


__all__ = ["AdapterProvenance", "HeldoutAnswer", "HeldoutScore"]
