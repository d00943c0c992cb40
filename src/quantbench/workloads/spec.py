"""The workload a benchmark point runs: traffic, API, load shape, size, precision and seed.

These models are the config-facing half of the load harness: they are read from the
``workloads:`` section of params.yaml (or the older single ``workload:``) or built from
``quantbench load`` flags, and every field's description doubles as help text. Which extra
request fields an engine accepts is not part of the workload (the same workload runs against
every engine); that is each engine's request profile (:mod:`quantbench.load.requests`).

Traffic comes from a named workload (``use: chat``, see :mod:`quantbench.workloads.builtin`), a
prompts dataset, random prompts of given lengths, a file of conversations, or an arrival trace.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from quantbench.settings import Settings
from quantbench.slo import Slo
from quantbench.workloads.builtin import NAMED

# A precision target: metric:pNN, optionally with its own half-width (ttft:p50 ±15%).
_TARGET = re.compile(
    r"(ttft|tpot|itl|e2e):p(\d{1,2}(?:\.\d+)?)(?:\s*(±|\+-|\+/-)\s*(\d+(?:\.\d+)?)%)?"
)

# A point's label names its result folder: one plain path component, never '..' or a separator.
SAFE_LABEL = re.compile(r"(?!\.\.?$)[A-Za-z0-9][A-Za-z0-9._=+-]{0,63}")


class DatasetPrompts(Settings):
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


class RandomPrompts(Settings):
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


class ConversationsFile(Settings):
    """Conversations from a JSONL file of OpenAI messages (docs/LOAD.md has the format)."""

    source: Literal["conversations"] = "conversations"
    path: Path = Field(description="JSONL file, one conversation per line.")
    max_tokens: int | None = Field(
        default=None, gt=0, description="Output length of turns that give none of their own."
    )


class TracePrompts(Settings):
    """Requests replayed at the arrival times of a trace (Mooncake's JSONL fields)."""

    source: Literal["trace"] = "trace"
    path: Path = Field(description="JSONL file, one request per line, with arrival times.")
    block_tokens: int = Field(
        default=512, gt=0, description="Tokens per hash_ids block (Mooncake uses 512)."
    )
    time_scale: float = Field(
        default=1.0, gt=0, description="Multiply the trace's arrival times (0.5: twice as fast)."
    )


PromptSource = Annotated[
    DatasetPrompts | RandomPrompts | ConversationsFile | TracePrompts,
    Field(discriminator="source"),
]


class PrecisionSpec(Settings):
    """Size each point from a precision target instead of a fixed count: measure until every
    target percentile is known to within ``rel_half_width`` (its interval at ``confidence``)."""

    targets: list[str] = Field(
        default_factory=lambda: ["ttft:p50", "tpot:p50"],
        description="metric:percentile pairs (metric ttft, tpot, itl or e2e), each optionally with "
        "its own half-width: 'ttft:p50 ±15%' (or '+-15%'); without one, rel_half_width.",
    )
    rel_half_width: float = Field(
        default=0.05,
        gt=0,
        lt=1,
        description="Half-width of each interval over its value (0.05: ±5 %).",
    )
    confidence: float = Field(default=0.95, gt=0, lt=1, description="Confidence of the intervals.")
    min_requests: int = Field(
        default=12, ge=6, description="Measured requests before the target is first checked."
    )
    max_requests: int = Field(
        default=200,
        ge=6,
        description="Stop measuring here even if the target is not met (the row then says so).",
    )
    power: float = Field(
        default=0.8,
        gt=0,
        lt=1,
        description="Each point measures at least the requests with which every SLO percentile "
        "and error-rate limit passes with this probability for a configuration a quarter of "
        "whose allowance lies beyond the limit (a p90 limit at the true p97.5; an error rate a "
        "quarter of its limit): at 95 %, 0.8 needs p50 11, p90 61, p95 153, p99 773, "
        "error_rate<=0.1 61 (slo.requests_needed), capped at max_requests.",
    )
    early_pass: bool = Field(
        default=False,
        description="Let a point stop as soon as its SLO verdict is a pass, whatever its "
        "precision targets say, in two looks: the first at the fewest requests that can show every limit met, "
        "the last at the cap. The verdict's error rate is split between them, so each look "
        "judges at one-sided 1 - (1 - confidence)/2 (97.5 % for 95 %) and the cap sized for the "
        "power at that level (a p90: 85 requests, not 61). A point far within its limits stops "
        "at the first look (p90 and error_rate<=0.1: 36 requests); one near them runs to the "
        "cap. Only for SLOs of latency percentiles (ttft, tpot, e2e) and the error rate, upper "
        "limits; any other constraint keeps one look (quantbench.slo.early_pass).",
    )

    @field_validator("targets")
    @classmethod
    def _targets_parse(cls, values: list[str]) -> list[str]:
        for text in values:
            m = _TARGET.fullmatch(text.strip())
            if not m:
                raise ValueError(
                    f"precision target {text!r}: write metric:pNN with metric ttft, tpot, itl "
                    "or e2e (e.g. ttft:p50), optionally with its own half-width (ttft:p50 ±15%)"
                )
            # a target no sample can meet would measure every point to max_requests and still
            # report it unmet: refuse it here, not after an hour of load
            if not 0 < float(m.group(2)) < 100:
                raise ValueError(
                    f"precision target {text!r}: percentile p{m.group(2)} is not a percentile a "
                    "sample can bound; give one between p1 and p99 (e.g. ttft:p50)"
                )
            if m.group(4) is not None and not 0 < float(m.group(4)) < 100:
                raise ValueError(
                    f"precision target {text!r}: a half-width of {m.group(4)}% can never be "
                    "met (no finite sample knows a percentile exactly, and 100% bounds nothing); "
                    "give one between 1% and 50% (e.g. ttft:p50 ±15%)"
                )
        return values

    @model_validator(mode="after")
    def _min_below_max(self) -> PrecisionSpec:
        if self.min_requests > self.max_requests:
            raise ValueError("precision.min_requests is above precision.max_requests")
        return self

    def parsed(self) -> list[tuple[str, float, float]]:
        """(metric, percentile, relative half-width) per target."""
        out = []
        for text in self.targets:
            m = _TARGET.fullmatch(text.strip())
            assert m is not None
            width = float(m.group(4)) / 100 if m.group(4) else self.rel_half_width
            out.append((m.group(1), float(m.group(2)), width))
        return out


class _PointSize(Settings):
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
        description="Cap on conversations in progress; an arrival that finds the cap reached "
        "waits (its wait is recorded as arrival lag).",
    )
    ramp_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds over which the rate rises linearly from 0 before it holds (a ramp).",
    )

    def default_label(self) -> str:
        cap = f"-max{self.max_concurrency}" if self.max_concurrency else ""
        burst = "" if self.burstiness == 1.0 else f"-b{self.burstiness:g}"
        ramp = f"-ramp{self.ramp_s:g}" if self.ramp_s else ""
        return f"r{self.rate:g}{burst}{ramp}{cap}"


LoadPoint = Annotated[ClosedLoop | OpenLoop, Field(discriminator="kind")]

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)


NAMED_WORKLOADS = ("chat", "rag", "long-generation", "multi-turn", "bursty")
# What a named workload given no size measures to (its lengths vary per request, so TTFT does).
DEFAULT_NAMED_PRECISION = ("ttft:p50 ±15%", "tpot:p50 ±5%")


class WorkloadSpec(Settings):
    """Everything that defines the traffic of a benchmark, independent of the server."""

    name: str = Field(
        default="default",
        description="The workload's name: results, report sections and best_config.json keys.",
    )
    use: Literal["chat", "rag", "long-generation", "multi-turn", "bursty"] | None = Field(
        default=None,
        description="A named workload (docs/LOAD.md: its shape and where it comes from); its "
        "traffic, load points and SLO profile are the defaults of the keys below.",
    )
    length_scale: float = Field(
        default=1.0,
        gt=0,
        le=16,
        description="Multiply a named workload's token lengths (0.1 for a small CPU run): the "
        "shape stays, the sizes shrink.",
    )
    think_scale: float = Field(
        default=1.0, ge=0, description="Multiply a named workload's think times."
    )
    conversations: int = Field(
        default=256,
        gt=0,
        description="Distinct conversations a named workload generates (a run cycles them).",
    )
    slo: Slo | None = Field(
        default=None,
        description="The SLO profile this workload is judged by; default: the named workload's, "
        "else the top-level slo.",
    )
    api: Literal["chat", "completions"] = Field(
        default="chat", description="Endpoint: /v1/chat/completions or /v1/completions."
    )
    prompts: PromptSource | None = Field(
        default=None,
        description="Where prompts come from: a dataset, random, conversations or a trace "
        "(leave out with `use:`).",
    )
    load: list[LoadPoint] | None = Field(
        default=None,
        min_length=1,
        description="Load shape; several points make a sweep, run one after the other "
        "(default: the named workload's).",
    )
    num_requests: int | None = Field(
        default=None,
        gt=0,
        description="Measured conversations per point (after warm-up); with `precision`, the "
        "most that are measured.",
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        description="Measured seconds per point (after warm-up): conversations started in this "
        "time are measured, and the point waits for them to end under the same load.",
    )
    precision: PrecisionSpec | None = Field(
        default=None,
        description="Size each point from a precision target (docs/BENCH.md) instead of a "
        "fixed count.",
    )
    warmup_requests: int | None = Field(
        default=None,
        ge=0,
        description="Conversations sent first in each point and left out of results; default: "
        "one per stream (a closed loop's concurrency, at least 1).",
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
    request_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="A request still streaming this long after it was sent fails (a stream kept "
        "alive by comments, or one that never ends).",
    )
    point_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description="A point stops this long after its start; its unfinished requests count "
        "as not served.",
    )
    unique_prompts: bool = Field(
        default=True,
        description="Begin each conversation's first message with a marker of its own (4 "
        "digits, within the message's length), so no conversation sent again finds its prompt "
        "in a prefix cache (a cache then helps only where the workload reuses a prefix: a "
        "shared system prompt, a conversation's history); off: prompts as they are.",
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

    @model_validator(mode="before")
    @classmethod
    def _a_named_workload_sizes_itself(cls, data: Any) -> Any:
        """A named workload given no size (``use: rag`` alone, or ``quantbench load --workload
        rag``) measures each point to its default precision: TTFT p50 within ±15 % and TPOT p50
        within ±5 % (12 to 200 requests), rather than being refused for having no size."""
        if not isinstance(data, dict) or not data.get("use") or data.get("workers"):
            return data
        if any(data.get(k) is not None for k in ("num_requests", "duration_s", "precision")):
            return data
        points = data.get("load")
        points = [points] if isinstance(points, dict) else (points or [])
        if any(
            isinstance(p, dict) and (p.get("num_requests") or p.get("duration_s")) for p in points
        ):
            return data
        return {**data, "precision": {"targets": list(DEFAULT_NAMED_PRECISION)}}

    @model_validator(mode="after")
    def _named_or_given(self) -> WorkloadSpec:
        if self.use is None and self.prompts is None:
            raise ValueError(
                f"workload {self.name!r} has no traffic: name one (use: chat, rag, "
                "long-generation, multi-turn, bursty) or give prompts (a dataset, random, "
                "conversations or a trace)"
            )
        if self.use is not None and self.prompts is not None:
            raise ValueError(
                f"workload {self.name!r}: give either use: {self.use} or prompts:, not both"
            )
        if self.load is None and self.use is None:
            raise ValueError(f"workload {self.name!r} has no load points (load:)")
        if self.precision is not None and self.workers:
            raise ValueError(
                "precision sizes a point from the measured requests one load process sees: "
                "use workers: 0 with it, or set num_requests instead"
            )
        return self

    @model_validator(mode="after")
    def _every_point_has_a_size(self) -> WorkloadSpec:
        for i, point in enumerate(self.points):
            n = point.num_requests or self.num_requests
            d = point.duration_s or self.duration_s
            if n is None and d is None and self.precision is None:
                raise ValueError(
                    f"load point {i} ({self.point_label(i)}) has no size: set num_requests, "
                    "duration_s or precision on the workload (or a size on the point)"
                )
            if isinstance(point, ClosedLoop) and n is not None and n < point.concurrency:
                # Fewer measured conversations than streams: the measured sample is what one
                # burst happened to be, not a steady state of c streams.
                raise ValueError(
                    f"load point {i} ({self.point_label(i)}) measures {n} conversations on "
                    f"{point.concurrency} streams, so it never measures the load it names: set "
                    f"num_requests to at least {point.concurrency} (a few times it is better), "
                    "or use duration_s or precision"
                )
            if self.workers and isinstance(point, ClosedLoop) and point.concurrency < self.workers:
                raise ValueError(
                    f"load point {i} has concurrency {point.concurrency} but workers is "
                    f"{self.workers}: each worker process needs at least one stream; lower "
                    "workers or raise concurrency"
                )
        labels = [self.point_label(i) for i in range(len(self.points))]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"load points must have distinct labels, repeated: {dupes}")
        return self

    @property
    def points(self) -> list[ClosedLoop | OpenLoop]:
        """The load points: the workload's own, else its named workload's."""
        if self.load is not None:
            return list(self.load)
        from pydantic import TypeAdapter

        assert self.use is not None
        adapter: TypeAdapter[Any] = TypeAdapter(LoadPoint)
        return [adapter.validate_python(p) for p in NAMED[self.use].load]

    def slo_text(self, default: Slo) -> Slo:
        """The SLO profile this workload is judged by."""
        if self.slo is not None:
            return self.slo
        if self.use is not None:
            return NAMED[self.use].slo
        return default

    def warmup_for(self, point: ClosedLoop | OpenLoop) -> int:
        """Warm-up conversations of a point: as set, else one per stream."""
        if self.warmup_requests is not None:
            return self.warmup_requests
        return point.concurrency if isinstance(point, ClosedLoop) else 1

    def point_label(self, i: int) -> str:
        point = self.points[i]
        return point.label or point.default_label()

    def point_size(self, i: int) -> tuple[int | None, float | None]:
        """(measured conversations, measured seconds) of point i; None where unset."""
        point = self.points[i]
        n = point.num_requests or self.num_requests
        if n is None and self.precision is not None:
            n = self.precision.max_requests
        return (n, point.duration_s or self.duration_s)
