"""Metrics of one load point, computed from the raw per-request records.

Never from Locust's statistics: those are bucketed (a 423 ms median reads as 500 ms). The
definitions, and the sample each is over:

* **measured requests**: the requests of measured conversations (warm-up and cool-down
  excluded); each has a status: completed, failed, incomplete (still streaming when the point
  stopped) or unsent (arrived, never sent). Incomplete + unsent = **not served**.
* **window**: from the first measured conversation's start (open loop: its scheduled arrival) to
  the end of the last measured request. Cool-down conversations kept the load as it was until
  then, so every measured request ran under the load the point claims.
* TTFT: first content chunk - send; E2E: end of stream - send; TPOT: (E2E - TTFT) / (tokens - 1)
  for two tokens or more; ITL: gaps between content chunks, pooled. Over completed measured
  requests; each percentile with its distribution-free interval (quantbench.precision), or "too
  few requests" where the sample cannot bound it. A closed loop's values are not independent
  (pooled gaps of requests that share decode steps move together, and so do consecutive TTFTs on
  a server whose state drifts), so each interval is given the values' time order (TTFT, TPOT and
  E2E by send, ITL gaps by the arrival of the chunk that ends them) and widened by batch means
  where they were correlated.
* **output throughput**: the output tokens of every request (any phase) that arrived inside the
  window, over its duration, with a batch-means interval. A request cut at the window's end
  counts with the tokens it delivered inside it.
* request throughput: completed measured requests over the window; total token throughput adds
  their prompt tokens' rate.
* **goodput**: measured requests meeting every per-request SLO over the window; **good output
  throughput**: the window's token rate times the share of measured output tokens that belong to
  such requests (what users actually get). Its interval combines the rate's batch means with the
  good share's own interval (a request at a time) and their correlation (see
  ``_good_tps_interval``); taken over the good requests' tokens alone, the window's first and
  last slices ramp (the warm-up's and cool-down's tokens count in the rate, not among the good),
  which widened it 1.3-4.5 times.
* **error rate**: (failed + not served) / measured requests, with its Clopper-Pearson interval.
* SLO latency checks run over every measured request, an unanswered one counting as infinitely
  late; percentile and error-rate verdicts are decided on one-sided bounds and state their power
  (quantbench.slo), "undecided" where the bounds straddle the limit.
* achieved load, delivered lengths, the client's own lag and CPU, cache use: see the schema's
  LoadAchieved, LengthCheck, HarnessCheck and CacheUse.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from quantbench import slo as slo_mod
from quantbench.load.records import RequestRecord
from quantbench.precision import (
    RATE_SLICES,
    rate_interval,
    slice_totals,
    slices_interval,
    t_quantile,
)

# The result models are the session output's schema (re-exported: import them from here or there).
from quantbench.schemas.session import (
    CacheUse,
    Figure,
    HarnessCheck,
    LatencyStats,
    LengthCheck,
    LoadAchieved,
    PointResult,
    Speculation,
    Window,
    pct_key,
)

# The client is the bottleneck when its event loop typically wakes later than a tenth of the gap
# between two tokens (at least 1 ms; p50: that delay is in every figure), or when it spends this
# much of the wall time on the CPU. Its worst wake-ups (p99) are reported, not flagged: on a
# 2-core machine a busy server preempts the client now and then (vLLM's CPU engine did, 18-21 ms
# at p99 with the client using 5-9 % of a core), which moves tail figures by that much and
# leaves the medians, the window's token count and the verdicts on them as they are.
CLIENT_LAG_P50_MS = 1.0
CLIENT_LAG_LIMIT_MS = 5.0
CLIENT_LAG_SHARE = 0.1
CLIENT_CPU_LIMIT = 0.8
# Closed loop: every stream busy for this share of the window; open loop: the achieved rate
# within this share of the offered one.
LOAD_TOLERANCE = 0.05


def _max_concurrency(records: Sequence[RequestRecord]) -> int:
    events: list[tuple[float, int]] = []
    for r in records:
        if r.end_time is not None and r.status != "unsent":
            events += [(r.send_time, 1), (r.end_time, -1)]
    events.sort()  # at equal times an end (-1) sorts before a start (+1)
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _mean_in_flight(records: Sequence[RequestRecord], start: float, end: float) -> float:
    if end <= start:
        return 0.0
    busy = sum(
        _overlap(r.send_time, r.end_time, start, end)
        for r in records
        if r.end_time is not None and r.status != "unsent"
    )
    return busy / (end - start)


def _mean_streams_busy(records: Sequence[RequestRecord], start: float, end: float) -> float:
    """Conversations in progress (first send to last end, think times included), averaged."""
    spans: dict[str, tuple[float, float]] = {}
    for r in records:
        if r.end_time is None or r.status == "unsent":
            continue
        key = r.conversation or r.request_id
        lo, hi = spans.get(key, (r.send_time, r.end_time))
        spans[key] = (min(lo, r.send_time), max(hi, r.end_time))
    if end <= start:
        return 0.0
    return sum(_overlap(a, b, start, end) for a, b in spans.values()) / (end - start)


def _peak_tokens_per_s(records: Sequence[RequestRecord], start: float, end: float) -> float:
    buckets: Counter[int] = Counter()
    for r in records:
        for t, n in zip(r.chunk_times, r.chunk_tokens, strict=False):
            if start <= t <= end:
                buckets[int(t - start)] += n
    return float(max(buckets.values(), default=0))


def _proportion(k: int, n: int, confidence: float) -> Figure | None:
    """k of n with its Clopper-Pearson (exact binomial) interval."""
    from scipy.stats import beta

    if n == 0:
        return None
    alpha = 1 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return Figure(value=k / n, low=low, high=high, confidence=confidence, n=n,
                  method="Clopper-Pearson")  # fmt: skip


def _count_rate_interval(
    requests: Sequence[RequestRecord], value: float, start: float, end: float, confidence: float
) -> Figure | None:
    """Requests per second over the window with its batch-means interval: each request counts
    in the time slice where it ended (the rate's value is the one reported beside it)."""
    if end <= start:
        return None
    events = [(r.end_time, 1.0) for r in requests if r.end_time is not None]
    iv = rate_interval(events, start, end, confidence)
    if iv is None:
        return None
    return iv.model_copy(update={"value": value, "low": max(0.0, iv.low)})


def _chunk_events(requests: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    return [(t, n) for r in requests for t, n in zip(r.chunk_times, r.chunk_tokens, strict=False)]


def _wilson(share: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``share`` of ``n`` (an effective count)."""
    d = 1 + z * z / n
    centre = (share + z * z / (2 * n)) / d
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def _token_centre(r: RequestRecord) -> float:
    """When a request delivered its tokens, on average (its send time without any)."""
    total = sum(r.chunk_tokens)
    if not total:
        return r.send_time
    return sum(t * n for t, n in zip(r.chunk_times, r.chunk_tokens, strict=False)) / total


def _good_tps_interval(
    events: Sequence[tuple[float, float]],
    measured: Sequence[RequestRecord],
    good: Sequence[RequestRecord],
    share: float,
    good_tps: float,
    window: tuple[float, float],
    confidence: float,
) -> Figure | None:
    """Good output throughput's interval: the window's token rate times the good share, each
    with its own interval, combined on the log scale with their correlation (MOVER, Zou &
    Donner 2008).

    * the rate: batch means over the window's time slices (the output throughput's interval);
    * the good share: a share of tokens, good or not a request at a time, so its Wilson score
      interval over the requests' effective count (Kish: (sum n)^2 / sum n^2 of their
      delivered tokens n). Batch means of per-slice shares (what this was) counted a request's
      goodness once in every slice its tokens fell in and took a share near 1 for a precise one
      (few bad requests, a small spread exactly when the estimate is high): it covered 89-91 % at
      good shares of 0.69-0.92 (tests/load/test_metrics.py);
    * their correlation: a bad request (a late first token) also holds its stream without
      tokens, so rate and share move together: the correlation over the slices of the rate and
      of the share's linearised terms (each request whole, at its tokens' mean time), never below
      0. Without it, 91-93 %.

    With every measured request good the share has no spread to resample, and this is the
    output throughput's interval exactly."""
    from scipy.stats import norm

    start, end = window
    if end <= start or not good or share <= 0:
        return None
    all_k = slice_totals(events, start, end)
    rates = all_k / ((end - start) / RATE_SLICES)
    if share >= 1:
        iv = slices_interval(rates, good_tps, confidence)
        return None if iv is None else iv.model_copy(update={"low": max(0.0, iv.low)})
    mean_rate = float(rates.mean())
    if mean_rate <= 0:
        return None
    d_rate = (
        t_quantile(confidence, RATE_SLICES - 1)
        * float(rates.std(ddof=1))
        / (math.sqrt(RATE_SLICES) * mean_rate)
    )
    delivered = [
        float(r.output_tokens if r.output_tokens is not None else sum(r.chunk_tokens))
        for r in measured
    ]
    total, squares = sum(delivered), sum(n * n for n in delivered)
    if total <= 0:
        return None
    low_s, high_s = _wilson(share, total * total / squares, float(norm.ppf((1 + confidence) / 2)))
    d_low = math.log(share / low_s) if low_s > 0 else math.inf
    d_high = math.log(high_s / share)
    ids = {id(r) for r in good}
    m_k = slice_totals([(_token_centre(r), n) for r, n in zip(measured, delivered, strict=True)],
                       start, end)  # fmt: skip
    g_k = slice_totals(
        [(_token_centre(r), float(r.output_tokens or 0)) for r in measured if id(r) in ids],
        start, end,
    )  # fmt: skip
    terms = g_k / max(float(g_k.mean()), 1e-300) - m_k / float(m_k.mean())
    rho = 0.0
    if float(terms.std()) > 0 and float(all_k.std()) > 0:
        rho = min(1.0, max(0.0, float(np.corrcoef(all_k, terms)[0, 1])))

    def joint(d: float) -> float:
        return math.sqrt(d_rate * d_rate + d * d + 2 * rho * d_rate * d)

    low = good_tps * math.exp(-joint(d_low)) if math.isfinite(d_low) else 0.0
    return Figure(
        value=good_tps, low=low, high=good_tps * math.exp(joint(d_high)),
        confidence=confidence, n=RATE_SLICES,
        method=f"batch means over {RATE_SLICES} slices, the good share's Wilson interval "
        f"over {len(measured)} requests (MOVER)",
    )  # fmt: skip


def _timed(requests: Sequence[RequestRecord], metric: str) -> tuple[list[float], list[float]]:
    """A per-request latency's values and their requests' send times (their time order)."""
    pairs = [(getattr(r, metric), r.send_time) for r in requests]
    kept = [(v, t) for v, t in pairs if v is not None]
    return [v for v, _ in kept], [t for _, t in kept]


def _slo_sample(measured: Sequence[RequestRecord], metric: str) -> tuple[list[float], list[float]]:
    """What an SLO on ``metric`` is checked over: each completed measured request's value, each
    unanswered one (failed, cut, unsent) as infinitely late, with their send times."""
    values, times = _timed([r for r in measured if r.status == "completed"], metric)
    unanswered = [r.send_time for r in measured if r.status != "completed"]
    return [*values, *([math.inf] * len(unanswered))], [*times, *unanswered]


def _window(measured: Sequence[RequestRecord]) -> tuple[float, float]:
    starts = [r.scheduled_time if r.scheduled_time is not None else r.send_time for r in measured]
    start = min(starts, default=0.0)
    ends = [r.end_time for r in measured if r.end_time is not None]
    return start, max(ends, default=start)


def summarize(
    records: Sequence[RequestRecord],
    *,
    point: str,
    scenario: str,
    shape: dict[str, Any],
    percentiles: Sequence[float],
    constraints: Sequence[slo_mod.Constraint] = (),
    confidence: float = 0.95,
    verdict_confidence: float | None = None,
    fixed_output_length: bool = False,
    meta: dict[str, Any] | None = None,
    wall_offset: float | None = None,
) -> PointResult:
    """The point's result from all of its records (every phase), as defined above.

    ``verdict_confidence``: the one-sided level the SLO verdicts are judged at where it is not
    the intervals' ``confidence`` (a point of the early-pass design: quantbench.slo.EarlyPass).

    ``meta`` is what the load process wrote beside its records (its stop reason, its own lag and
    CPU); ``wall_offset`` turns a monotonic time into epoch seconds for the window's label.
    """
    meta = meta or {}
    measured = [r for r in records if r.phase == "measured"]
    done = [r for r in measured if r.status == "completed"]
    failed = [r for r in measured if r.status == "failed"]
    incomplete = [r for r in measured if r.status == "incomplete"]
    unsent = [r for r in measured if r.status == "unsent"]
    wanted = set(percentiles) | {c.percentile for c in constraints if c.percentile is not None}
    pcts = sorted(wanted)

    start, end = _window(measured)
    duration = end - start

    def rate(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    ttfts, ttft_times = _timed(done, "ttft")
    tpots, tpot_times = _timed(done, "tpot")
    e2es, e2e_times = _timed(done, "e2e")
    # each gap at the arrival of the chunk that ends it: gaps of concurrent requests interleave
    gap_pairs = [(g, t) for r in done for g, t in zip(r.itls, r.chunk_times[1:], strict=False)]
    itls, itl_times = [g for g, _ in gap_pairs], [t for _, t in gap_pairs]
    lags = [r.send_time - r.scheduled_time for r in measured if r.scheduled_time is not None]
    out_tokens = sum(r.output_tokens or 0 for r in done)
    in_tokens = sum(r.prompt_tokens or 0 for r in done)

    # every token any request delivered inside the window
    events = [
        (t, n)
        for r in records
        for t, n in zip(r.chunk_times, r.chunk_tokens, strict=False)
        if start <= t <= end
    ]
    window_tokens = int(sum(n for _, n in events))
    out_tps = rate(window_tokens)
    tps_interval = rate_interval(events, start, end, confidence) if duration > 0 else None

    rps_interval = _count_rate_interval(done, rate(len(done)), start, end, confidence)

    goodput, goodput_interval, good_tps, good_interval = _goodput(
        constraints, measured, done, events, out_tps, (start, end), confidence
    )

    not_served = len(incomplete) + len(unsent)
    bad = len(failed) + not_served
    errors = Counter((r.error or "unknown error")[:200] for r in [*failed, *incomplete, *unsent])

    lag_stats = LatencyStats.of(lags, pcts, confidence)
    load = _load_achieved(records, measured, shape, lags, lag_stats, (start, end))

    lengths = _lengths(done, fixed_output_length)

    harness = _harness(meta, itls)

    result = PointResult(
        point=point,
        scenario=scenario,
        shape=shape,
        started_at=(start + wall_offset) if wall_offset is not None else time.time(),
        window=Window(
            start=start,
            end=end,
            duration_s=duration,
            started_at_wall=(start + wall_offset) if wall_offset is not None else time.time(),
        ),
        duration_s=duration,
        stop_reason=str(meta.get("stop_reason", "")),
        requests=len(measured),
        completed=len(done),
        failed=len(failed),
        incomplete=len(incomplete),
        unsent=len(unsent),
        not_served=not_served,
        warmup_excluded=sum(1 for r in records if r.phase == "warmup"),
        cooldown_excluded=sum(1 for r in records if r.phase == "cooldown"),
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        window_output_tokens=window_tokens,
        request_throughput=rate(len(done)),
        request_throughput_interval=rps_interval,
        output_throughput=out_tps,
        output_throughput_interval=tps_interval,
        total_token_throughput=out_tps + rate(in_tokens),
        goodput=goodput,
        goodput_interval=goodput_interval,
        good_output_throughput=good_tps,
        good_output_throughput_interval=good_interval,
        error_rate=bad / len(measured) if measured else 0.0,
        error_rate_interval=_proportion(bad, len(measured), confidence),
        max_concurrent_requests=_max_concurrency(measured),
        max_output_tokens_per_s=_peak_tokens_per_s(records, start, end),
        ttft=LatencyStats.of(ttfts, pcts, confidence, ttft_times),
        tpot=LatencyStats.of(tpots, pcts, confidence, tpot_times),
        itl=LatencyStats.of(itls, pcts, confidence, itl_times),
        e2e=LatencyStats.of(e2es, pcts, confidence, e2e_times),
        arrival_lag=lag_stats,
        load=load,
        lengths=lengths,
        harness=harness,
        cache=_cache(done, in_tokens),
        speculation=_speculation(done),
        token_sources=dict(Counter(r.tokens_source for r in done)),
        errors=dict(errors.most_common(10)),
    )
    if constraints:
        _judge(result, constraints, measured, pcts, verdict_confidence or confidence)
    return result


def _goodput(
    constraints: Sequence[slo_mod.Constraint],
    measured: Sequence[RequestRecord],
    done: Sequence[RequestRecord],
    events: Sequence[tuple[float, float]],
    out_tps: float,
    window: tuple[float, float],
    confidence: float,
) -> tuple[float | None, Figure | None, float | None, Figure | None]:
    """Goodput and good output throughput with their intervals (None without a per-request
    SLO): the requests meeting every per-request limit, and the share of the window's tokens
    that went to them."""
    per_request = slo_mod.per_request(constraints)
    if not per_request:
        return None, None, None, None
    start, end = window
    duration = end - start
    good = [r for r in done if slo_mod.request_meets(per_request, r)]
    goodput = len(good) / duration if duration > 0 else 0.0
    goodput_interval = _count_rate_interval(good, goodput, start, end, confidence)
    good_tokens = sum(r.output_tokens or 0 for r in good)
    # the share of every token the measured requests delivered (a failed or cut request's
    # partial answer included) that went to requests users would call good
    delivered_measured = sum(
        r.output_tokens if r.output_tokens is not None else sum(r.chunk_tokens) for r in measured
    )
    share = good_tokens / delivered_measured if delivered_measured else 0.0
    good_tps = out_tps * share
    good_interval = _good_tps_interval(events, measured, good, share, good_tps, window, confidence)
    return goodput, goodput_interval, good_tps, good_interval


def _load_achieved(
    records: Sequence[RequestRecord],
    measured: Sequence[RequestRecord],
    shape: dict[str, Any],
    lags: Sequence[float],
    lag_stats: LatencyStats | None,
    window: tuple[float, float],
) -> LoadAchieved:
    """Whether the point ran under the load it claims: streams busy (closed loop), or the
    arrival schedule kept (open loop)."""
    start, end = window
    unsent = [r for r in measured if r.status == "unsent"]
    kind = "rate" if shape.get("kind") == "rate" else "concurrency"
    offered = float(shape.get(kind, 0) or 0)
    in_flight = _mean_in_flight(records, start, end)
    if kind == "concurrency":
        busy = _mean_streams_busy(records, start, end)
        reached = busy >= offered * (1 - LOAD_TOLERANCE)
        achieved_rate = None
        note = (
            ""
            if reached
            else (f"only {busy:.2f} of {offered:g} streams busy on average over the window")
        )
    else:
        busy = None
        sends = sorted(r.send_time for r in measured if r.turn == 0 and r.status != "unsent")
        due = sorted(r.scheduled_time for r in measured if r.turn == 0 and r.scheduled_time)
        span = sends[-1] - sends[0] if len(sends) > 1 else 0.0
        achieved_rate = (len(sends) - 1) / span if span > 0 else None
        planned_span = due[-1] - due[0] if len(due) > 1 else 0.0
        planned_rate = (len(due) - 1) / planned_span if planned_span > 0 else None
        lag_p95 = float(np.percentile(lags, 95)) if lags else 0.0
        # The arrivals are random by design (a gamma process): what the client must keep is the
        # schedule, so the point reached its load when it sent on time (p95 lag within a tenth
        # of a mean gap, or 10 ms) and every measured arrival was sent.
        gap = 1.0 / offered if offered else math.inf
        reached = lag_p95 <= max(0.1 * gap, 0.010) and not unsent
        note = (
            ""
            if reached
            else (
                f"fell behind the schedule: p95 lag {lag_p95 * 1000:.0f} ms (a mean gap is "
                f"{gap * 1000:.0f} ms), {len(unsent)} arrivals never sent"
            )
        )
        if planned_rate is not None and achieved_rate is not None:
            note = (note + "; " if note else "") + (
                f"sent {achieved_rate:.3g}/s where the drawn schedule had {planned_rate:.3g}/s "
                f"(offered mean {offered:g}/s)"
            )
    return LoadAchieved(
        kind=kind, offered=offered, mean_in_flight=in_flight,
        peak_in_flight=_max_concurrency(records), mean_streams_busy=busy,
        achieved_rate=achieved_rate, arrival_lag=lag_stats, reached=reached, note=note,
    )  # fmt: skip


def _lengths(done: Sequence[RequestRecord], fixed_output_length: bool) -> LengthCheck:
    """Delivered against requested answer lengths (checked where the length was fixed)."""
    mismatched = sum(
        1
        for r in done
        if r.requested_tokens is not None and r.output_tokens is not None
        and r.output_tokens != r.requested_tokens
    )  # fmt: skip
    return LengthCheck(
        requested_tokens=sum(r.requested_tokens or 0 for r in done),
        delivered_tokens=sum(r.output_tokens or 0 for r in done), mismatched=mismatched,
        checked=fixed_output_length, ok=(mismatched == 0) if fixed_output_length else True,
    )  # fmt: skip


def _harness(meta: dict[str, Any], itls: Sequence[float]) -> HarnessCheck:
    """Whether the load generator, not only the server, set the figures: its loop's lateness
    and its CPU, as the load process measured them."""
    loop = meta.get("loop_lag") or {}
    lag, lag_p50 = loop.get("p99_ms"), loop.get("p50_ms")
    cpu_s, wall_s = meta.get("client_cpu_s"), meta.get("client_wall_s")
    cpu_share = cpu_s / wall_s if cpu_s is not None and wall_s else None
    # A late wake-up of the client's loop delays the chunk it should have read: it matters
    # against the finest figure the point reports, the gap between tokens.
    itl_ms = float(np.median(itls)) * 1000 if itls else None
    p50_limit = max(CLIENT_LAG_P50_MS, CLIENT_LAG_SHARE * itl_ms) if itl_ms else CLIENT_LAG_P50_MS
    client_bound = bool(
        (lag_p50 is not None and lag_p50 > p50_limit)
        or (cpu_share is not None and cpu_share > CLIENT_CPU_LIMIT)
    )
    tail_note = (
        f"the client's loop woke up to {lag:.0f} ms late at p99 (the server shared its cores): "
        "tail latencies may be that much high"
        if lag is not None and lag > max(CLIENT_LAG_LIMIT_MS, 5 * CLIENT_LAG_SHARE * (itl_ms or 0))
        else ""
    )
    return HarnessCheck(
        loop_lag_p99_ms=lag, client_cpu_share=cpu_share, client_bound=client_bound,
        note=(
            f"the load generator ran behind (loop lag p50 {lag_p50 or 0:.1f} ms, p99 "
            f"{lag or 0:.1f} ms, CPU {(cpu_share or 0):.0%}): the client, not only the server, set "
            "these figures"
            if client_bound else tail_note
        ),
    )  # fmt: skip


def _cache(done: Sequence[RequestRecord], in_tokens: int) -> CacheUse:
    """Prompt tokens the server's prefix cache served, where it reported them."""
    cached = [r.cached_tokens for r in done if r.cached_tokens is not None]
    return CacheUse(
        prompt_tokens=in_tokens,
        cached_tokens=sum(cached) if cached else None,
        served_share=(sum(cached) / in_tokens) if cached and in_tokens else None,
    )


def _speculation(done: Sequence[RequestRecord]) -> Speculation | None:
    """Draft tokens proposed and accepted, where the server reported them."""
    drafted = [r for r in done if r.draft_tokens is not None]
    if not drafted:
        return None
    proposed = sum(r.draft_tokens or 0 for r in drafted)
    accepted = sum(r.draft_accepted or 0 for r in drafted)
    return Speculation(
        requests=len(drafted),
        drafted=proposed,
        accepted=accepted,
        acceptance_rate=accepted / proposed if proposed else None,
    )


def _judge(
    result: PointResult,
    constraints: Sequence[slo_mod.Constraint],
    measured: Sequence[RequestRecord],
    pcts: Sequence[float],
    confidence: float,
) -> None:
    """The point's SLO verdicts at one-sided ``confidence``, set on ``result``: an unanswered
    request is infinitely late for the SLO's latency percentiles. Where ``confidence`` is not
    the level of the result's own bounds, every latency and the error rate are bounded again
    at it."""
    slo_stats: dict[str, LatencyStats] = {}
    own = result.error_rate_interval.confidence if result.error_rate_interval else confidence
    again = not math.isclose(own, confidence)
    unanswered = ("ttft", "e2e") if result.failed or result.not_served else ()
    for metric in slo_mod.LATENCY_METRICS if again else unanswered:
        if metric in unanswered:
            values, times = _slo_sample(measured, metric)
        elif metric == "itl":
            done = [r for r in measured if r.status == "completed"]
            pairs = [(g, t) for r in done for g, t in zip(r.itls, r.chunk_times[1:], strict=False)]
            values, times = [g for g, _ in pairs], [t for _, t in pairs]
        else:
            values, times = _timed([r for r in measured if r.status == "completed"], metric)
        stats = LatencyStats.of(values, pcts, confidence, times)
        if stats is not None:
            slo_stats[metric] = stats
    judged = result
    if again and result.error_rate_interval is not None:
        bad = round(result.error_rate * result.error_rate_interval.n)
        judged = result.model_copy(
            update={
                "error_rate_interval": _proportion(bad, result.error_rate_interval.n, confidence)
            }
        )
    result.slo = slo_mod.evaluate(constraints, lambda m, s: judged.metric_value(m, s, slo_stats))
    result.slo_verdict = slo_mod.overall(result.slo)
    result.slo_passed = result.slo_verdict == "pass"


__all__ = ["LatencyStats", "PointResult", "pct_key", "summarize"]
