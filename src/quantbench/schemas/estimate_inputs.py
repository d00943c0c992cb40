"""What an estimate is asked about, as its result records it: the variant (how it stores its
weights), the request shape and the SLOs; with the storage formats and the llama.cpp file types
an estimate can name.

The ``estimate:`` section of params.yaml and the ``quantbench estimate`` flags build on these
(:mod:`quantbench.estimate.spec`); they are here, below the schemas that store them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from quantbench.settings import Settings

# File type (mix) -> the tensor type used for most matrices.
MIX_BASE_TYPE: dict[str, str] = {
    "F32": "F32",
    "F16": "F16",
    "BF16": "BF16",
    "Q8_0": "Q8_0",
    "Q4_0": "Q4_0",
    "Q4_1": "Q4_1",
    "Q5_0": "Q5_0",
    "Q5_1": "Q5_1",
    "Q2_K": "Q2_K",
    "Q3_K_S": "Q3_K",
    "Q3_K_M": "Q3_K",
    "Q3_K_L": "Q3_K",
    "Q4_K_S": "Q4_K",
    "Q4_K_M": "Q4_K",
    "Q5_K_S": "Q5_K",
    "Q5_K_M": "Q5_K",
    "Q6_K": "Q6_K",
}


GGUF_MIXES = tuple(MIX_BASE_TYPE)


@dataclass(frozen=True)
class LayoutFields:
    """Which of :class:`EstimatedVariant`'s fields a weight layout takes (the others are refused),
    and their defaults where left out."""

    fields: frozenset[str] = frozenset()
    defaults: Mapping[str, Any] = field(default_factory=dict)


GGUF_LAYOUT = "gguf"
"""The layout of llama.cpp's files, whose variants name their file type (one of GGUF_MIXES)."""

# The weight layouts the estimator counts bytes for, by name (``EstimatedVariant.format``), with
# the fields each takes: the one declaration of the built-in ones (here, below the schemas that
# store an estimate, so a stored estimate reads without the estimator; the estimator's registry,
# quantbench.estimate.formats, takes each one's fields from here and counts the bytes of each),
# and any a plugin adds through that registry (quantbench.estimate.formats.register_layout).
GROUP_FIELDS = frozenset({"bits", "group_size", "sym"})
WEIGHT_LAYOUTS: dict[str, LayoutFields] = {
    **{name: LayoutFields() for name in ("bf16", "fp16", "fp32", "fp8", "w8a8")},
    # as the project produces them: GPTQ with 128-weight groups, symmetric (GPTQModel format);
    # AWQ as compressed-tensors pack-quantized int4 with 64-weight groups, asymmetric
    "gptq": LayoutFields(GROUP_FIELDS, {"bits": 4, "group_size": 128, "sym": True}),
    "awq": LayoutFields(GROUP_FIELDS, {"bits": 4, "group_size": 64, "sym": False}),
    GGUF_LAYOUT: LayoutFields(frozenset({"gguf_type"})),
}


def declare_layout(name: str, fields: LayoutFields) -> None:
    """Make layout ``name`` known to :class:`EstimatedVariant` with the fields it takes (a second
    declaration of one name replaces it): the estimator's registry declares a plugin's layout
    here when it registers it."""
    WEIGHT_LAYOUTS[name] = fields


WeightFormat = str
"""A weight layout's name: a key of :data:`WEIGHT_LAYOUTS`."""


GROUP_QUANT_BITS = (2, 3, 4, 8)
_FIELDS = ("bits", "group_size", "sym", "gguf_type")


class EstimatedVariant(Settings):
    """How a model variant stores its weights."""

    name: str = Field(default="", description="variant name; defaults to the format label")
    format: WeightFormat = Field(
        description="weight storage layout: a registered one (bf16, fp16, fp32, fp8, gptq, awq, "
        "w8a8, gguf, or a plugin's)"
    )
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
        """The layout's defaults where a field is left out (settings are frozen once built)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        layout = WEIGHT_LAYOUTS.get(str(data.get("format")))
        for key, value in (layout.defaults if layout else {}).items():
            if data.get(key) is None:
                data[key] = value
        if isinstance(data.get("gguf_type"), str):
            data["gguf_type"] = data["gguf_type"].upper()
        return data

    @model_validator(mode="after")
    def _check_format_fields(self) -> EstimatedVariant:
        layout = WEIGHT_LAYOUTS.get(self.format)
        if layout is None:
            raise ValueError(
                f"format {self.format!r} is not a weight layout the estimator knows; known: "
                f"{', '.join(WEIGHT_LAYOUTS)} (a new one: quantbench.estimate.formats."
                "register_layout)"
            )
        if "bits" in layout.fields and self.bits not in GROUP_QUANT_BITS:
            raise ValueError(
                f"{self.format} bits={self.bits} is not allowed; use one of {GROUP_QUANT_BITS}"
            )
        if "group_size" in layout.fields and (
            self.group_size is None or (self.group_size != -1 and self.group_size <= 0)
        ):
            raise ValueError(f"{self.format} group_size={self.group_size} must be positive or -1")
        if "gguf_type" in layout.fields:
            if self.gguf_type is None and self.path is None:
                raise ValueError("format gguf needs gguf_type (e.g. Q4_K_M) or the .gguf path")
            if self.gguf_type is not None and self.gguf_type not in GGUF_MIXES:
                raise ValueError(
                    f"gguf_type {self.gguf_type!r} is not known; use one of {list(GGUF_MIXES)}"
                )
        for name in _FIELDS:
            if name not in layout.fields and getattr(self, name) is not None:
                if name == "gguf_type":
                    raise ValueError(f"gguf_type={self.gguf_type!r} only applies to format gguf")
                raise ValueError(f"{name} does not apply to format {self.format}")
        return self

    @model_validator(mode="after")
    def _name_defaults_to_label(self) -> EstimatedVariant:
        if not self.name:
            object.__setattr__(self, "name", self.label)  # frozen: set once, while validating
        return self

    @property
    def label(self) -> str:
        """A short description such as ``gptq-w4g128-sym`` or ``gguf-Q4_K_M``."""
        if self.bits is not None and self.group_size is not None:
            sym = "" if self.sym is None else ("-sym" if self.sym else "-asym")
            return f"{self.format}-w{self.bits}g{self.group_size}{sym}"
        takes = WEIGHT_LAYOUTS.get(self.format, LayoutFields()).fields
        if self.gguf_type is not None or "gguf_type" in takes:  # a file type: gguf-Q4_K_M
            return f"{self.format}-{self.gguf_type or Path(str(self.path)).stem}"
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
