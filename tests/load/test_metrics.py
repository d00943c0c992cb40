"""Metric definitions on hand-made records, with values worked out by hand."""

from __future__ import annotations

import pytest

from quantbench.load.metrics import LatencyStats, pct_key, summarize
from quantbench.load.records import RequestRecord
from quantbench.slo import parse_slo


def rec(
    i: int,
    send: float,
    chunks: list[float],
    end: float,
    *,
    status: str = "completed",
    out: int | None = None,
    prompt: int = 10,
    warmup: bool = False,
    scheduled: float | None = None,
) -> RequestRecord:
    return RequestRecord(
        request_id=str(i), index=i, point="pt", scenario="s", prompt_id="p", warmup=warmup,
        worker=0, send_time=send, scheduled_time=scheduled,
        first_token_time=chunks[0] if chunks else None, end_time=end, chunk_times=chunks,
        chunk_tokens=[1] * len(chunks), prompt_tokens=prompt,
        output_tokens=len(chunks) if out is None else out, status=status,  # type: ignore[arg-type]
        error=None if status == "completed" else "boom",
    )  # fmt: skip


def summary(records: list[RequestRecord], slo: str | None = None):  # type: ignore[no-untyped-def]
    return summarize(
        records, point="pt", scenario="s", shape={"kind": "concurrency", "concurrency": 2},
        percentiles=[50, 90, 99], constraints=parse_slo(slo) if slo else [],
    )  # fmt: skip


def test_per_request_definitions() -> None:
    # send 0, first token 0.1, then 0.3 and 0.6, end 0.7 with 3 output tokens
    r = rec(0, 0.0, [0.1, 0.3, 0.6], 0.7)
    assert r.ttft == pytest.approx(0.1)
    assert r.e2e == pytest.approx(0.7)
    assert r.tpot == pytest.approx((0.7 - 0.1) / 2)
    assert r.itls == pytest.approx([0.2, 0.3])
    assert rec(1, 0.0, [0.1], 0.2).tpot is None  # one token: TPOT undefined


def test_tpot_uses_reported_tokens_not_chunks() -> None:
    # 2 chunks carrying 5 tokens (e.g. an engine that batches tokens per chunk)
    r = rec(0, 0.0, [0.1, 0.5], 0.5, out=5)
    assert r.tpot == pytest.approx(0.4 / 4)


def test_point_aggregates() -> None:
    records = [
        rec(0, 0.0, [0.1, 0.2], 0.2, warmup=True),  # excluded
        rec(1, 1.0, [1.1, 1.3, 1.4], 1.5),  # ttft 100, e2e 500, tpot 200, itl 200 100
        rec(2, 1.0, [1.3, 1.4], 2.0),  # ttft 300, e2e 1000, tpot 700, itl 100
        rec(3, 1.5, [], 1.6, status="failed", out=0),
        rec(4, 2.0, [2.2], 3.0, status="incomplete", out=1),
    ]
    p = summary(records)
    assert (p.requests, p.completed, p.failed, p.incomplete, p.warmup_excluded) == (4, 2, 1, 1, 1)
    assert p.duration_s == pytest.approx(2.0)  # first measured send 1.0 .. last end 3.0
    assert p.request_throughput == pytest.approx(1.0)
    assert p.total_output_tokens == 5
    assert p.output_throughput == pytest.approx(2.5)
    assert p.total_token_throughput == pytest.approx((5 + 20) / 2)
    assert p.error_rate == pytest.approx(1 / 3)
    assert p.ttft.mean_ms == pytest.approx(200)
    assert p.ttft.median_ms == pytest.approx(200)
    assert p.ttft.std_ms == pytest.approx(100)  # population std of 100 and 300
    assert p.e2e.percentiles_ms["p90"] == pytest.approx(500 + 0.9 * 500)
    assert p.tpot.min_ms == pytest.approx(200) and p.tpot.max_ms == pytest.approx(700)
    assert sorted(round(x) for x in [p.itl.min_ms, p.itl.median_ms, p.itl.max_ms]) == [
        100,
        100,
        200,
    ]
    assert p.itl.count == 3
    assert p.max_concurrent_requests == 2
    assert p.goodput is None and p.slo_passed is None


def test_goodput_counts_requests_meeting_all_per_request_slos() -> None:
    records = [
        rec(0, 0.0, [0.1, 0.2], 0.2),  # ttft 100 tpot 100
        rec(1, 0.0, [0.3, 0.4], 0.4),  # ttft 300: fails ttft
        rec(2, 0.0, [0.1, 0.9], 1.0),  # tpot 900: fails tpot
        rec(3, 0.0, [0.05], 0.05),  # 1 token: tpot counts as 0 -> good
    ]
    p = summary(records, "ttft<=200ms; tpot<=500ms; goodput>=1")
    assert p.duration_s == pytest.approx(1.0)
    assert p.goodput == pytest.approx(2.0)
    # Without a statistic a latency SLO is about every request: the point is checked on max.
    ttft = next(r for r in p.slo if r.constraint.metric == "ttft")
    assert ttft.reason == "ttft max = 300 ms > 200 ms"
    assert p.slo_passed is False


def test_slo_evaluation_on_a_point() -> None:
    records = [rec(i, 0.0, [0.1 * (i + 1), 0.1 * (i + 1) + 0.05], 2.0) for i in range(10)]
    p = summary(records, "ttft:p50<=600ms; ttft:p99<600ms; rps>=10; error_rate==0")
    results = {r.constraint.text: r for r in p.slo}
    assert results["ttft:p50<=600ms"].reason == "ttft p50 = 550 ms <= 600 ms"
    assert results["ttft:p99<600ms"].reason == "ttft p99 = 991 ms >= 600 ms"
    assert not results["ttft:p99<600ms"].passed
    assert results["rps>=10"].reason == "rps = 5 req/s < 10 req/s"
    assert results["error_rate==0"].passed
    assert p.slo_passed is False
    assert "p99" in p.ttft.percentiles_ms


def test_slo_percentile_not_in_the_report_is_still_computed() -> None:
    records = [rec(i, 0.0, [0.01 * (i + 1)], 1.0) for i in range(100)]
    p = summary(records, "ttft:p97.5<=1s")
    assert p.ttft.percentiles_ms["p97.5"] == pytest.approx(0.01 * (1 + 0.975 * 99) * 1000)


def test_open_loop_arrival_lag() -> None:
    records = [rec(0, 1.002, [1.1], 1.2, scheduled=1.0), rec(1, 2.010, [2.1], 2.2, scheduled=2.0)]
    p = summary(records)
    assert p.arrival_lag.max_ms == pytest.approx(10)
    assert summary([rec(0, 1.0, [1.1], 1.2)]).arrival_lag is None


def test_no_completed_requests() -> None:
    p = summary([rec(0, 0.0, [], 1.0, status="failed", out=0)])
    assert p.ttft is None and p.request_throughput == 0 and p.error_rate == 1.0


def test_latency_stats_lookup_and_keys() -> None:
    stats = LatencyStats.of([0.1, 0.2, 0.3], [50, 99.9])
    assert stats.stat("p50") == pytest.approx(200)
    assert stats.stat(None) == stats.stat("max") == pytest.approx(300)
    assert stats.stat("p42") is None
    assert pct_key(99.9) == "p99.9" and pct_key(50.0) == "p50"
