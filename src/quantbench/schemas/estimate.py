"""``reports/estimate/estimates.json`` (stage ``estimate``): roofline estimates of every variant.

Written by :func:`quantbench.estimate.stage.write_estimates`: one :class:`VariantEstimate` per
variant and hardware entry (the estimator's own :class:`~quantbench.estimate.estimator.
EstimateResult`, plus the hardware entry's name and, when measured points were given, the
comparison with them), and one flat :class:`EstimateSummaryRow` each for tables and plots.

The estimator's result models are reused as they are, so a change to their fields is a change
of this schema: bump ``schema_version`` with it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version
from quantbench.schemas.roofline import (
    ComparisonRow,
    ConcurrencyPoint,
    EstimateResult,
    FittedEfficiency,
    PairPrediction,
    WeightBytes,
)


class StoredWeightBytes(WeightBytes):
    """WeightBytes as written: ``bits_per_weight`` is computed, so it is dropped on reading."""

    @model_validator(mode="before")
    @classmethod
    def _drop_computed(cls, data: Any) -> Any:
        if isinstance(data, WeightBytes) and not isinstance(data, cls):
            return data.model_dump(exclude={"bits_per_weight"})
        if isinstance(data, dict) and "bits_per_weight" in data:
            return {k: v for k, v in data.items() if k != "bits_per_weight"}
        return data


class EstimateComparison(Strict):
    """The estimate beside measured points (quantbench.estimate.compare)."""

    rows: list[ComparisonRow]
    fits: list[FittedEfficiency]


class VariantEstimate(Strict, EstimateResult):
    """One variant on one hardware entry."""

    OMIT_WHEN_NONE = frozenset({"comparison"})

    hardware_name: str = Field(description="The hardware entry as configured (a name or a path).")
    weights: StoredWeightBytes
    comparison: EstimateComparison | None = Field(
        None, description="Only when measured points of this variant were given."
    )

    @property
    def variant_name(self) -> str:
        return self.variant.name

    def at(self, concurrency: int) -> ConcurrencyPoint | None:
        """The estimate at one concurrency, if it was computed."""
        return next((p for p in self.points if p.concurrency == concurrency), None)

    def comparison_rows(self) -> list[ComparisonRow]:
        return list(self.comparison.rows) if self.comparison else []


class EstimateSummaryRow(Strict):
    """The headline figures of one estimate, flat (quantbench.estimate.stage.summary_row)."""

    variant: str
    hardware: str
    engine: str
    bits_per_weight: float
    weights_source: str
    prefill_bound: str
    decode_bound: str | None
    ttft_ms_c1: float
    itl_ms_c1: float | None
    decode_tps_c1: float | None
    best_concurrency: int | None
    best_output_tps: float | None
    limit_kv_memory: int
    limit_prefill_compute: int
    limit_decode: int
    limit_overall: int


class EstimatesFile(StageOutput):
    """Every variant on every ``estimate.hardware`` entry."""

    OUTPUT: ClassVar[str] = "reports/estimate/estimates.json"
    STAGE: ClassVar[str] = "estimate"
    # 2: per-pair predictions (``pairs``) and the engine's queue in each point; a version-1
    # file has neither and reads as it is. 3: a variant's format is any registered weight
    # layout (quantbench.estimate.formats.register_layout), not one of eight: nothing to convert
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1), 1: stamp(2), 2: stamp(3)}

    schema_version: Literal[3] = version(3)
    estimates: list[VariantEstimate]
    summary: list[EstimateSummaryRow]
    pairs: list[PairPrediction] = Field(
        default_factory=list,
        description="Each bench pair, setting and closed-loop workload on this machine, at the "
        "concurrencies the bench measures (quantbench.estimate.pairs); empty without a "
        "calibration.",
    )


__all__ = [
    "EstimateComparison",
    "EstimateSummaryRow",
    "EstimatesFile",
    "PairPrediction",
    "StoredWeightBytes",
    "VariantEstimate",
]
