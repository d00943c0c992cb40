"""Settings of the estimator: the variant to cost, the workload, SLOs and efficiencies.

These are the pydantic models behind the ``estimate:`` section of params.yaml and the
``quantbench estimate`` flags. Every default that is an assumption says so in its
description.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from quantbench.engines.registry import engine_names
from quantbench.estimate.hardware import check_hardware_name
from quantbench.estimate.kvcache import KV_CACHE_DTYPES
from quantbench.schemas.estimate_inputs import EstimateWorkload, SloSpec
from quantbench.settings import Settings

AUTO, NONE = "auto", "none"


def engine_choices() -> tuple[str, ...]:
    """``auto``, ``none`` (the pure roofline) and every registered engine, plugins included."""
    return (AUTO, NONE, *engine_names())


class EfficiencyOverrides(Settings):
    """Replace the hardware entry's efficiency factors (None keeps the entry's)."""

    compute: float | None = Field(
        default=None, gt=0, le=1, description="fraction of peak matmul throughput reached"
    )
    bandwidth: float | None = Field(
        default=None, gt=0, le=1, description="fraction of peak/measured bandwidth reached"
    )
    step_overhead_ms: float | None = Field(
        default=None,
        ge=0,
        description="fixed cost per forward step (launches, scheduling, Python); None uses the "
        "engine's overhead measured on this machine, or 0 (the pure roofline) where none is",
    )


class MeasureSettings(Settings):
    """How ``--hardware this`` measures the current machine."""

    threads: int | None = Field(default=None, ge=1, description="torch threads; None = all cores")
    cache_dir: Path | None = Field(
        default=None, description="where figures are cached; None = ~/.cache/quantbench"
    )
    remeasure: bool = Field(default=False, description="ignore the cache and measure again")


class ProbeSettings(Settings):
    """How each bench stage probes its pair's server for the estimate
    (:mod:`quantbench.estimate.pair_probe`)."""

    repeats: int = Field(
        default=2, ge=1, le=5, description="requests alone at each of the three prompt lengths"
    )
    max_batch: int = Field(
        default=4,
        ge=1,
        le=16,
        description="most requests sent together (2..this, each once), "
        "up to the setting's batch limit; beyond it a step is extended by its mean cost per "
        "sequence",
    )
    output_tokens: int = Field(
        default=32, ge=8, le=256, description="tokens each probe request generates (fixed)"
    )


class EstimateSettings(Settings):
    """The ``estimate:`` section of params.yaml."""

    hardware: list[str] = Field(
        default=["this"], description="table names (H100, L4 ...), 'this', or saved JSON paths"
    )
    workload: EstimateWorkload = Field(
        default=EstimateWorkload(),
        description="request shape and concurrencies; in the pipeline, unless set here: the "
        "first workload's mean lengths at the concurrencies the workloads measure "
        "(quantbench.estimate.pipeline)",
    )
    slo: SloSpec = Field(
        default=SloSpec(),
        description="TTFT and ITL targets; in the pipeline, unless set here: the tightest TTFT "
        "and TPOT/ITL limits of `slo:`",
    )
    efficiency: EfficiencyOverrides = EfficiencyOverrides()
    engine: str = Field(
        default="auto",
        description="engine whose per-step overhead to add: auto, none or a registered engine; "
        "auto: llama.cpp for GGUF and transformers otherwise on a CPU, vLLM on a GPU",
    )
    kv_cache_dtype: str = Field(
        default="auto", description=f"KV-cache dtype, one of {list(KV_CACHE_DTYPES)}"
    )
    memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="share of device memory the engine may use (vLLM's default 0.9)",
    )
    measure: MeasureSettings = MeasureSettings()
    probe: ProbeSettings = ProbeSettings()

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, values: list[str]) -> list[str]:
        if not values:
            raise ValueError("hardware needs at least one entry")
        return [check_hardware_name(v) for v in values]

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in engine_choices():
            raise ValueError(f"engine {value!r} is not known; allowed: {list(engine_choices())}")
        return value

    @field_validator("kv_cache_dtype")
    @classmethod
    def _known_kv_dtype(cls, value: str) -> str:
        if value not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype {value!r} is not supported; allowed: {list(KV_CACHE_DTYPES)}"
            )
        return value
