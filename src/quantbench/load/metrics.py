"""Metrics of one load point, computed from the raw per-request records.

Never from Locust's statistics: those are bucketed (a 423 ms median reads as 500 ms). Definitions,
all over the point's measured requests (warm-up excluded):

* TTFT: first content chunk's arrival - send time, completed requests.
* E2E: end of stream - send time, completed requests.
* TPOT: (E2E - TTFT) / (output tokens - 1), completed requests with at least 2 output tokens.
* ITL: gaps between consecutive content chunks, all completed requests' gaps pooled.
* duration: first send to last end (in-flight requests end when the run stops).
* request throughput: completed / duration; output throughput: completed requests' output
  tokens / duration; total token throughput adds their prompt tokens.
* goodput: completed requests meeting every per-request SLO / duration (a request with fewer
  than 2 output tokens has TPOT 0 for this purpose, as in ``vllm bench serve``).
* error rate: failed / (completed + failed); incomplete requests are neither.

Statistics: mean, population standard deviation, and percentiles by linear interpolation
between closest ranks (numpy's default, as ``vllm bench serve`` uses).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from quantbench import slo as slo_mod
from quantbench.load.records import RequestRecord


def pct_key(p: float) -> str:
    """'p50', 'p99', 'p99.9': how a percentile is named in results."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p:g}"


class LatencyStats(BaseModel):
    """Distribution of one latency, in milliseconds."""

    model_config = ConfigDict(extra="forbid")

    count: int
    mean_ms: float
    median_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    percentiles_ms: dict[str, float] = Field(description="'p50' -> value, for each percentile.")

    @classmethod
    def of(cls, seconds: Sequence[float], percentiles: Sequence[float]) -> LatencyStats | None:
        if not seconds:
            return None
        ms = np.asarray(seconds, dtype=float) * 1000.0
        return cls(
            count=len(ms),
            mean_ms=float(ms.mean()),
            median_ms=float(np.median(ms)),
            std_ms=float(ms.std()),
            min_ms=float(ms.min()),
            max_ms=float(ms.max()),
            percentiles_ms={pct_key(p): float(np.percentile(ms, p)) for p in percentiles},
        )

    def stat(self, statistic: str | None) -> float | None:
        """Value of 'mean', 'median', 'max', 'min' or 'pNN'; None: per request, i.e. max."""
        if statistic in (None, "max"):
            return self.max_ms
        if statistic == "mean":
            return self.mean_ms
        if statistic == "median":
            return self.median_ms
        if statistic == "min":
            return self.min_ms
        assert statistic is not None
        return self.percentiles_ms.get(statistic)


class PointResult(BaseModel):
    """Results of one load point: the typed result schema of the harness."""

    model_config = ConfigDict(extra="forbid")

    point: str
    scenario: str
    shape: dict[str, Any] = Field(description="The load point as configured.")
    started_at: float = Field(description="Epoch seconds of the first measured send.")
    duration_s: float
    requests: int = Field(description="Measured requests (warm-up excluded).")
    completed: int
    failed: int
    incomplete: int
    warmup_excluded: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float = Field(description="Completed requests per second.")
    output_throughput: float = Field(description="Output tokens per second.")
    total_token_throughput: float = Field(description="Prompt + output tokens per second.")
    goodput: float | None = Field(
        description="Requests per second meeting all per-request SLOs; None without SLOs."
    )
    error_rate: float
    max_concurrent_requests: int
    max_output_tokens_per_s: float = Field(description="Most output tokens in any 1 s bucket.")
    ttft: LatencyStats | None
    tpot: LatencyStats | None
    itl: LatencyStats | None
    e2e: LatencyStats | None
    arrival_lag: LatencyStats | None = Field(
        description="Open loop: send time - scheduled arrival time."
    )
    token_sources: dict[str, int] = Field(description="Where output token counts came from.")
    errors: dict[str, int] = Field(description="Most frequent error messages and their counts.")
    slo: list[slo_mod.ConstraintResult] = Field(default_factory=list)
    slo_passed: bool | None = None

    def metric_value(self, metric: str, statistic: str | None) -> float | None:
        """Lookup for :func:`quantbench.slo.evaluate`."""
        if metric in slo_mod.LATENCY_METRICS:
            stats: LatencyStats | None = getattr(self, metric)
            return None if stats is None else stats.stat(statistic)
        return {
            "rps": self.request_throughput,
            "output_tps": self.output_throughput,
            "total_tps": self.total_token_throughput,
            "goodput": self.goodput,
            "error_rate": self.error_rate,
        }[metric]


def _max_concurrency(records: Sequence[RequestRecord]) -> int:
    events: list[tuple[float, int]] = []
    for r in records:
        if r.end_time is not None:
            events += [(r.send_time, 1), (r.end_time, -1)]
    events.sort()  # at equal times an end (-1) sorts before a start (+1)
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def _peak_tokens_per_s(records: Sequence[RequestRecord], start: float) -> float:
    buckets: Counter[int] = Counter()
    for r in records:
        for t, n in zip(r.chunk_times, r.chunk_tokens, strict=False):
            buckets[int(t - start)] += n
    return float(max(buckets.values(), default=0))


def summarize(
    records: Sequence[RequestRecord],
    *,
    point: str,
    scenario: str,
    shape: dict[str, Any],
    percentiles: Sequence[float],
    constraints: Sequence[slo_mod.Constraint] = (),
) -> PointResult:
    measured = [r for r in records if not r.warmup]
    done = [r for r in measured if r.status == "completed"]
    failed = [r for r in measured if r.status == "failed"]
    incomplete = [r for r in measured if r.status == "incomplete"]
    # Percentiles an SLO asks for are computed even if not configured for the report.
    wanted = set(percentiles) | {c.percentile for c in constraints if c.percentile is not None}
    pcts = sorted(wanted)

    start = min((r.send_time for r in measured), default=0.0)
    end = max((r.end_time for r in measured if r.end_time is not None), default=start)
    duration = end - start

    def rate(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    ttfts = [r.ttft for r in done if r.ttft is not None]
    tpots = [r.tpot for r in done if r.tpot is not None]
    e2es = [r.e2e for r in done if r.e2e is not None]
    itls = [gap for r in done for gap in r.itls]
    lags = [r.send_time - r.scheduled_time for r in measured if r.scheduled_time is not None]
    out_tokens = sum(r.output_tokens or 0 for r in done)
    in_tokens = sum(r.prompt_tokens or 0 for r in done)

    per_request = slo_mod.per_request(constraints)
    goodput = None
    if per_request:
        good = sum(1 for r in done if slo_mod.request_meets(per_request, r))
        goodput = rate(good)

    errors = Counter((r.error or "unknown error")[:200] for r in failed)
    result = PointResult(
        point=point,
        scenario=scenario,
        shape=shape,
        started_at=start,
        duration_s=duration,
        requests=len(measured),
        completed=len(done),
        failed=len(failed),
        incomplete=len(incomplete),
        warmup_excluded=len(records) - len(measured),
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        request_throughput=rate(len(done)),
        output_throughput=rate(out_tokens),
        total_token_throughput=rate(out_tokens + in_tokens),
        goodput=goodput,
        error_rate=len(failed) / (len(done) + len(failed)) if done or failed else 0.0,
        max_concurrent_requests=_max_concurrency(measured),
        max_output_tokens_per_s=_peak_tokens_per_s(done, start),
        ttft=LatencyStats.of(ttfts, pcts),
        tpot=LatencyStats.of(tpots, pcts),
        itl=LatencyStats.of(itls, pcts),
        e2e=LatencyStats.of(e2es, pcts),
        arrival_lag=LatencyStats.of(lags, pcts),
        token_sources=dict(Counter(r.tokens_source for r in done)),
        errors=dict(errors.most_common(10)),
    )
    if constraints:
        result.slo = slo_mod.evaluate(constraints, result.metric_value)
        result.slo_passed = all(c.passed for c in result.slo)
    return result
