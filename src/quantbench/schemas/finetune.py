"""``reports/finetune.json`` (stage ``finetune``): the adapter, and whether it learned anything.

Written by ``stages/finetune.py`` from :func:`quantbench.lora.train.train_adapter` (an adapter
trained here: its data, steps, losses and time) or :func:`quantbench.lora.adopt.adopt_adapter`
(an adapter given in ``lora.adapter_path``: its provenance). Either way it holds held-out
accuracy of the base without and with the adapter, every answer included.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version
from quantbench.schemas.common import AdapterProvenance, HeldoutScore

TRAINED_ONLY = ("train_data", "trainable_parameters", "steps", "losses", "train_seconds")


class TrainData(Strict):
    path: str
    sha256: str
    chats: int = Field(description="Chats in the training file.")


class FinetuneReport(StageOutput):
    """What the finetune stage did (trained or adopted) and the held-out accuracy it led to."""

    OUTPUT: ClassVar[str] = "reports/finetune.json"
    STAGE: ClassVar[str] = "finetune"
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1)}
    OMIT_WHEN_NONE = frozenset({*TRAINED_ONLY, "adapter"})

    schema_version: Literal[1] = version(1)
    trained: bool = Field(description="True: trained here; false: adopted lora.adapter_path.")
    accuracy_before: float = Field(description="Held-out accuracy of the base alone.")
    accuracy_after: float = Field(description="Held-out accuracy with the adapter.")
    heldout_before: HeldoutScore
    heldout_after: HeldoutScore
    params: dict[str, Any] = Field(description="The lora: section of params.yaml as validated.")
    train_data: TrainData | None = Field(None, description="Trained only.")
    trainable_parameters: int | None = Field(None, description="Trained only: adapter weights.")
    steps: int | None = Field(None, description="Trained only: optimizer steps.")
    losses: list[float] | None = Field(None, description="Trained only: the loss of each step.")
    train_seconds: float | None = Field(None, description="Trained only: wall time of the loop.")
    adapter: AdapterProvenance | None = Field(None, description="Adopted only: the adapter given.")

    @model_validator(mode="after")
    def _one_kind(self) -> FinetuneReport:
        missing = [k for k in TRAINED_ONLY if getattr(self, k) is None]
        if self.trained and (missing or self.adapter is not None):
            raise ValueError(
                f"a trained adapter's report needs {', '.join(missing) or 'no adapter field'}"
            )
        if not self.trained and (self.adapter is None or len(missing) < len(TRAINED_ONLY)):
            raise ValueError("an adopted adapter's report needs `adapter` and no training fields")
        return self


__all__ = ["FinetuneReport", "TrainData"]
