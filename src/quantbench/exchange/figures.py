"""The figures a run of another tool is mapped to, each defined as quantbench defines it.

quantbench's definitions (:mod:`quantbench.load.metrics`): **TTFT** first content chunk - send;
**TPOT** per request, (E2E - TTFT) / (output tokens - 1), first token excluded, statistics over
requests; **ITL** the gaps between content chunks, pooled over requests; **E2E** end of stream -
send. These are ``vllm bench serve``'s. A tool's field is mapped to one of them only where it
measures the same quantity; where it measures another (GuideLLM's time per output token, which
includes the first token) it is left out and a note says so, never put under a name it does not
mean.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from quantbench.schemas.base import Strict

Tool = Literal["vllm-bench-serve", "aiperf", "guidellm"]

OURS = {
    "ttft": "time to first token: first content chunk - send (ms)",
    "tpot": "time per output token, first excluded: per request (E2E - TTFT) / (tokens - 1), "
    "statistics over requests (ms)",
    "itl": "inter-token latency: gaps between streamed chunks, pooled over requests (ms)",
    "e2e": "end-to-end latency: end of stream - send (ms)",
}


class ForeignStats(Strict):
    """One latency of a foreign run, in milliseconds, and the tool's field it came from."""

    field: str = Field(description="The tool's own field (and statistic) it was read from.")
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    weighting: str = Field(
        "per request",
        description="What the statistics are over: 'per request', 'per chunk' (pooled gaps) or "
        "the tool's own weighting (GuideLLM weights each request by its tokens).",
    )


class ForeignRun(Strict):
    """One measured run of another tool, in quantbench's figures (``OURS``)."""

    tool: Tool
    tool_version: str | None = Field(description="As the file says; None where it does not.")
    source: str = Field(description="The file it was read from.")
    label: str = Field(description="The run within the file (a GuideLLM file holds several).")
    model: str | None
    load: str = Field(description="The load as the tool ran it: 'concurrency 4', 'rate 2/s'.")
    requests: int | None = Field(description="Measured requests (completed + failed).")
    completed: int | None
    failed: int | None
    duration_s: float | None
    request_throughput: float | None = Field(description="Completed requests per second.")
    output_throughput: float | None = Field(description="Output tokens per second.")
    goodput: float | None = Field(description="Requests per second meeting the tool's SLOs.")
    ttft: ForeignStats | None
    tpot: ForeignStats | None
    itl: ForeignStats | None
    e2e: ForeignStats | None
    notes: list[str] = Field(
        default_factory=list,
        description="What the tool measured that is not mapped, or mapped with a difference.",
    )


class ImportedRuns(Strict):
    """``quantbench import``'s file: the runs read from one tool's file."""

    schema_version: Literal[1] = 1
    tool: Tool
    source: str
    definitions: dict[str, str] = Field(default_factory=lambda: dict(OURS))
    runs: list[ForeignRun]


def number(value: Any) -> float | None:
    """A figure as a float: None for missing, null and non-numbers ("inf" stays inf)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def count(value: Any) -> int | None:
    x = number(value)
    return None if x is None else round(x)
