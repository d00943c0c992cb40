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

from quantbench import slo as slo_mod
from quantbench.load.records import RequestRecord

# The result models are the session output's schema (re-exported: import them from here or there).
from quantbench.schemas.session import LatencyStats, PointResult, pct_key


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


__all__ = ["LatencyStats", "PointResult", "pct_key", "summarize"]
