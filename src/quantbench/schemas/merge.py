"""``reports/merge.json`` (stage ``merge``): the merge, and the proof that it is exact.

Written by ``stages/merge.py`` from :func:`quantbench.lora.merge.merge_and_verify`, whether or
not verification passed (``passed``, ``failures``). Exactness is judged in float32, adapter
model against merged model on the same ids; the saved file is checked to be exactly the float32
merge cast to ``saved_dtype``; the dtype's own cost is reported beside the same cost on the
base model, for context only (see docs/ARCHITECTURE.md, "Merge verified like with like").
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version
from quantbench.schemas.common import AdapterProvenance


class LogitComparison(Strict):
    """How far two models' logits are apart over the same positions."""

    max_abs_diff: float
    mean_abs_diff: float
    next_token_agreement: float = Field(description="Share of positions with the same argmax.")
    positions: int


class Probe(Strict):
    prompts: int = Field(description="Held-out question + answer chats run through both models.")
    positions: int = Field(description="Token positions compared over all of them.")


class MergeReport(StageOutput):
    """The merge's provenance and its verification."""

    OUTPUT: ClassVar[str] = "reports/merge.json"
    STAGE: ClassVar[str] = "merge"
    # 2: dtype_cost_computed_in (absent before: the costs were computed in the saved dtype)
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1), 1: stamp(2)}

    schema_version: Literal[2] = version(2)
    adapter: AdapterProvenance
    base_sha256: str = Field(description="Hash of the base's *.safetensors files.")
    merged_sha256: str = Field(description="Hash of the merged model's *.safetensors files.")
    probe: Probe
    exactness_float32: LogitComparison = Field(
        description="Adapter model vs merged model, both float32: the merge's own error."
    )
    saved_dtype: str
    saved_weights_exact: bool = Field(
        description="The saved tensors are exactly the float32 merge cast to saved_dtype."
    )
    dtype_cost: dict[str, LogitComparison] = Field(
        description="merged_saved_vs_adapter_float32 and base_cast_vs_base_float32: what the "
        "save dtype costs, on the merge and on the base (context, never judged)."
    )
    dtype_cost_computed_in: str | None = Field(
        None,
        description="What the dtype_cost logits were computed in: the saved dtype's weights "
        "computed in bfloat16 where this CPU runs it natively, in float32 where bf16 is emulated "
        "(quantbench.native.dtype; the weights' rounding alone then). None: in the saved dtype "
        "(files before schema version 2).",
    )
    tolerances: dict[str, Any] = Field(description="The merge: section of params as validated.")
    passed: bool
    failures: list[str] = Field(description="Each tolerance broken, as a sentence.")


__all__ = ["LogitComparison", "MergeReport", "Probe"]
