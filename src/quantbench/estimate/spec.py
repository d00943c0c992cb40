"""Settings of the estimator: the variant to cost, the workload, SLOs and efficiencies.

These are the pydantic models behind the ``estimate:`` section of params.yaml and the
``quantbench estimate`` flags. Every default that is an assumption says so in its
description.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from quantbench.estimate.gguf_types import GGUF_MIXES
from quantbench.estimate.hardware import check_hardware_name
from quantbench.estimate.kvcache import KV_CACHE_DTYPES
from quantbench.settings import Settings

WeightFormat = Literal["bf16", "fp16", "fp32", "fp8", "gptq", "awq", "w8a8", "gguf"]
GROUP_QUANT_FORMATS = ("gptq", "awq")
GROUP_QUANT_BITS = (2, 3, 4, 8)
# Defaults of the group-quantised formats, as the project produces them: GPTQ with 128-weight
# groups, symmetric (AutoGPTQ/GPTQModel format); AWQ as compressed-tensors pack-quantized
# int4 with 64-weight groups, asymmetric.
GROUP_QUANT_DEFAULTS: dict[str, dict[str, int | bool]] = {
    "gptq": {"bits": 4, "group_size": 128, "sym": True},
    "awq": {"bits": 4, "group_size": 64, "sym": False},
}


AUTO, NONE = "auto", "none"


def engine_choices() -> tuple[str, ...]:
    """``auto``, ``none`` (the pure roofline) and every registered engine, plugins included."""
    from quantbench.engines.registry import engine_names

    return (AUTO, NONE, *engine_names())


class EstimatedVariant(Settings):
    """How a model variant stores its weights."""

    name: str = Field(default="", description="variant name; defaults to the format label")
    format: WeightFormat = Field(description="weight storage format")
    bits: int | None = Field(default=None, description="gptq/awq: bits per weight (2, 3, 4, 8)")
    group_size: int | None = Field(
        default=None, description="gptq/awq: weights per scale group, -1 for one per row"
    )
    sym: bool | None = Field(
        default=None, description="gptq/awq: symmetric (no zero points needed)"
    )
    gguf_type: str | None = Field(
        default=None, description=f"gguf: llama.cpp file type, one of {list(GGUF_MIXES)}"
    )
    path: Path | None = Field(
        default=None,
        description="the variant's real artefact (a .gguf file or a quantised HF folder); "
        "when set, bytes are read from it instead of the nominal tables",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        """The format's defaults where a field is left out (settings are frozen once built)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        fmt = data.get("format")
        if fmt in GROUP_QUANT_FORMATS:
            for key, value in GROUP_QUANT_DEFAULTS[fmt].items():
                if data.get(key) is None:
                    data[key] = value
        if fmt == "gguf" and isinstance(data.get("gguf_type"), str):
            data["gguf_type"] = data["gguf_type"].upper()
        return data

    @model_validator(mode="after")
    def _check_format_fields(self) -> EstimatedVariant:
        if self.format in GROUP_QUANT_FORMATS:
            if self.bits not in GROUP_QUANT_BITS:
                raise ValueError(
                    f"{self.format} bits={self.bits} is not allowed; use one of {GROUP_QUANT_BITS}"
                )
            if self.group_size != -1 and self.group_size <= 0:
                raise ValueError(
                    f"{self.format} group_size={self.group_size} must be positive or -1"
                )
            if self.gguf_type is not None:
                raise ValueError(f"gguf_type={self.gguf_type!r} only applies to format gguf")
        elif self.format == "gguf":
            if self.gguf_type is None and self.path is None:
                raise ValueError("format gguf needs gguf_type (e.g. Q4_K_M) or the .gguf path")
            if self.gguf_type is not None and self.gguf_type not in GGUF_MIXES:
                raise ValueError(
                    f"gguf_type {self.gguf_type!r} is not known; use one of {list(GGUF_MIXES)}"
                )
            self._refuse(("bits", "group_size", "sym"))
        else:
            self._refuse(("bits", "group_size", "sym", "gguf_type"))
        return self

    @model_validator(mode="after")
    def _name_defaults_to_label(self) -> EstimatedVariant:
        if not self.name:
            object.__setattr__(self, "name", self.label)  # frozen: set once, while validating
        return self

    def _refuse(self, fields: tuple[str, ...]) -> None:
        for field in fields:
            if getattr(self, field) is not None:
                raise ValueError(f"{field} does not apply to format {self.format}")

    @property
    def label(self) -> str:
        """A short description such as ``gptq-w4g128-sym`` or ``gguf-Q4_K_M``."""
        if self.format in GROUP_QUANT_FORMATS:
            sym = "sym" if self.sym else "asym"
            return f"{self.format}-w{self.bits}g{self.group_size}-{sym}"
        if self.format == "gguf":
            return f"gguf-{self.gguf_type or Path(str(self.path)).stem}"
        return self.format


class EstimateWorkload(Settings):
    """Request shape and the concurrencies to report."""

    input_len: int = Field(default=1024, ge=1, description="prompt tokens per request")
    output_len: int = Field(default=512, ge=1, description="generated tokens per request")
    concurrency: list[int] = Field(
        default=[1, 2, 4, 8, 16, 32, 64, 128, 256],
        description="concurrent requests to report (closed loop: each finished request is "
        "replaced at once)",
    )

    @field_validator("concurrency")
    @classmethod
    def _positive_sorted(cls, values: list[int]) -> list[int]:
        if not values:
            raise ValueError("concurrency needs at least one value")
        bad = [v for v in values if v < 1]
        if bad:
            raise ValueError(f"concurrency values {bad} must be >= 1")
        return sorted(set(values))


class SloSpec(Settings):
    """Latency targets that define the prefill and decode concurrency limits."""

    ttft_ms: float = Field(
        default=1000.0,
        gt=0,
        description="time-to-first-token target; assumption: 1 s, an interactive chat budget",
    )
    itl_ms: float = Field(
        default=100.0,
        gt=0,
        description="inter-token latency target; assumption: 100 ms (10 tokens/s, faster "
        "than people read)",
    )


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
