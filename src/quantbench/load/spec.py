"""The workload a benchmark point runs: prompts, API, load shape, size, warm-up and seed.

These models are the config-facing half of the load harness: they are read from the
``workload:`` section of params.yaml or built from ``quantbench bench`` flags, and every field's
description doubles as help text. Which extra request fields an engine accepts is not part of the
workload (the same workload runs against every engine); that lives in :mod:`quantbench.load.engines`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# A point's label names its result folder: one plain path component, never '..' or a separator.
SAFE_LABEL = re.compile(r"(?!\.\.?$)[A-Za-z0-9][A-Za-z0-9._=+-]{0,63}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetPrompts(_Strict):
    """Prompts read from a JSONL file, one request per line."""

    source: Literal["dataset"] = "dataset"
    path: Path = Field(
        description="JSONL file; each line has 'id', and 'messages' (chat) or 'prompt' "
        "(completions), and optionally 'max_tokens' and 'scenario'."
    )
    max_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Output token limit for lines without their own 'max_tokens' "
        "(and for every line when override_max_tokens is true).",
    )
    override_max_tokens: bool = Field(
        default=False, description="Use max_tokens for every line, ignoring the lines' own."
    )
    shuffle: bool = Field(
        default=True, description="Shuffle the lines with the workload seed before cycling them."
    )


class RandomPrompts(_Strict):
    """Synthetic prompts of a given length, made of random common words."""

    source: Literal["random"] = "random"
    input_len: int = Field(
        gt=0, description="Prompt length in tokens (approximate without a tokenizer)."
    )
    output_len: int = Field(
        gt=0, description="Output length in tokens (max_tokens of each request)."
    )
    range_ratio: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Lengths are drawn uniformly from [len*(1-r), len*(1+r)]; 0 keeps them fixed.",
    )
    num_prompts: int = Field(
        default=256, gt=0, description="Distinct prompts to make; requests cycle through them."
    )


PromptSource = Annotated[DatasetPrompts | RandomPrompts, Field(discriminator="source")]


class _PointSize(_Strict):
    num_requests: int | None = Field(
        default=None,
        gt=0,
        description="Measured requests in this point (overrides the workload's num_requests).",
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        description="Measured seconds in this point (overrides the workload's duration_s).",
    )
    label: str | None = Field(
        default=None,
        description="Name of the point in results (it names a folder: letters, digits and "
        "'.', '_', '-', '=', '+'; at most 64 characters).",
    )

    @field_validator("label")
    @classmethod
    def _label_is_a_plain_name(cls, value: str | None) -> str | None:
        if value is not None and not SAFE_LABEL.fullmatch(value):
            raise ValueError(
                f"label {value!r} must be a plain name: letters, digits and '.', '_', '-', '=', "
                "'+' (no '/', no '..', at most 64 characters), since it names the point's folder"
            )
        return value


class ClosedLoop(_PointSize):
    """A fixed number of streams, each sending its next request as soon as the last one ends."""

    kind: Literal["concurrency"] = "concurrency"
    concurrency: int = Field(gt=0, description="Number of concurrent streams (Locust users).")

    def default_label(self) -> str:
        return f"c{self.concurrency}"


class OpenLoop(_PointSize):
    """Requests arriving at a rate regardless of how fast the server answers."""

    kind: Literal["rate"] = "rate"
    rate: float = Field(gt=0, description="Mean arrival rate in requests per second.")
    burstiness: float = Field(
        default=1.0,
        gt=0,
        description="Shape of the gamma-distributed gaps between arrivals: 1 is a Poisson process, "
        "below 1 burstier, above 1 more regular.",
    )
    max_concurrency: int | None = Field(
        default=None,
        gt=0,
        description="Cap on requests in flight; an arrival that finds the cap reached waits "
        "(its wait is recorded as arrival lag).",
    )

    def default_label(self) -> str:
        cap = f"-max{self.max_concurrency}" if self.max_concurrency else ""
        burst = "" if self.burstiness == 1.0 else f"-b{self.burstiness:g}"
        return f"r{self.rate:g}{burst}{cap}"


LoadPoint = Annotated[ClosedLoop | OpenLoop, Field(discriminator="kind")]

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)


class WorkloadSpec(_Strict):
    """Everything that defines the traffic of a benchmark, independent of the server."""

    name: str = Field(default="default", description="Scenario name recorded with every request.")
    api: Literal["chat", "completions"] = Field(
        default="chat", description="Endpoint: /v1/chat/completions or /v1/completions."
    )
    prompts: PromptSource = Field(description="Where prompts come from: a dataset or random.")
    load: list[LoadPoint] = Field(
        min_length=1,
        description="Load shape; several points make a sweep, run one after the other.",
    )
    num_requests: int | None = Field(
        default=None, gt=0, description="Measured requests per point (after warm-up)."
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        description="Measured seconds per point (after warm-up); requests still in flight at "
        "the end count as incomplete.",
    )
    warmup_requests: int = Field(
        default=0, ge=0, description="Requests sent first in each point and left out of results."
    )
    warmup_s: float = Field(
        default=0.0, ge=0, description="Seconds at the start of each point left out of results."
    )
    seed: int = Field(default=0, description="Seed for prompt order, lengths and arrival times.")
    fixed_output_length: bool = Field(
        default=False,
        description="Ask the engine to generate exactly max_tokens (ignore_eos/min_tokens or "
        "the engine's equivalent).",
    )
    request_fields: dict[str, object] = Field(
        default_factory=dict,
        description="Extra fields merged into every request body (e.g. temperature).",
    )
    timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="A request that receives no bytes for this long fails with a timeout.",
    )
    percentiles: list[float] = Field(
        default_factory=lambda: list(DEFAULT_PERCENTILES),
        description="Percentiles reported for TTFT, TPOT, ITL and E2E.",
    )
    keep_text: bool = Field(
        default=False, description="Keep each request's generated text in records.jsonl."
    )
    workers: int = Field(
        default=0,
        ge=0,
        description="0: one load process. N: a Locust master and N local worker processes.",
    )
    progress_interval_s: float = Field(
        default=2.0, gt=0, description="Seconds between progress lines on stderr."
    )

    @field_validator("load", mode="before")
    @classmethod
    def _one_point_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, dict) else value

    @field_validator("percentiles")
    @classmethod
    def _percentiles_in_range(cls, value: list[float]) -> list[float]:
        bad = [p for p in value if not 0 < p < 100]
        if bad:
            raise ValueError(f"percentiles must lie strictly between 0 and 100, got {bad}")
        return sorted(set(value))

    @model_validator(mode="after")
    def _every_point_has_a_size(self) -> WorkloadSpec:
        for i, point in enumerate(self.load):
            n = point.num_requests or self.num_requests
            d = point.duration_s or self.duration_s
            if n is None and d is None:
                raise ValueError(
                    f"load point {i} ({self.point_label(i)}) has no size: set num_requests or "
                    "duration_s on the workload or on the point"
                )
            if self.workers and isinstance(point, ClosedLoop) and point.concurrency < self.workers:
                raise ValueError(
                    f"load point {i} has concurrency {point.concurrency} but workers is "
                    f"{self.workers}: each worker process needs at least one stream; lower "
                    "workers or raise concurrency"
                )
        labels = [self.point_label(i) for i in range(len(self.load))]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"load points must have distinct labels, repeated: {dupes}")
        return self

    def point_label(self, i: int) -> str:
        point = self.load[i]
        return point.label or point.default_label()

    def point_size(self, i: int) -> tuple[int | None, float | None]:
        """(measured requests, measured seconds) of point i; either may be None, not both."""
        point = self.load[i]
        return (point.num_requests or self.num_requests, point.duration_s or self.duration_s)
