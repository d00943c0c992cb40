"""End-to-end runs against the fake server: load shapes, stop conditions, error accounting."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from pathlib import Path

import pytest

from quantbench.mock_server import Behaviour, Script

pytestmark = pytest.mark.server

RANDOM = {"source": "random", "input_len": 8, "output_len": 6, "num_prompts": 16}


def _max_in_flight(truth: list[dict]) -> int:  # type: ignore[type-arg]
    events = sorted([(t["arrival"], 1) for t in truth] + [(t["end"], -1) for t in truth])
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def test_closed_loop_keeps_exactly_n_streams(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=20, itl_ms=5, output_tokens=6)]),
        {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 4}],
         "num_requests": 24, "warmup_requests": 4},
    )  # fmt: skip
    p = run.point
    assert (p.requests, p.completed, p.warmup_excluded) == (24, 24, 4)
    assert len(run.records) == len(run.truth) == 28
    assert _max_in_flight(run.truth) == 4
    assert p.max_concurrent_requests == 4
    assert p.total_output_tokens == 24 * 6
    assert all(r.warmup == (r.index < 4) for r in run.records)
    assert {r.tokens_source for r in run.records} == {"usage"}


def test_open_loop_arrivals_follow_the_rate(bench) -> None:  # type: ignore[no-untyped-def]
    rate = 40.0
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=5, itl_ms=5, output_tokens=3)]),
        {"prompts": RANDOM, "load": [{"kind": "rate", "rate": rate}], "num_requests": 120},
    )
    sends = sorted(r.send_time for r in run.records)
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    # 119 exponential gaps: the mean is within ~3 standard errors of 1/rate, and their
    # spread is that of a Poisson process (coefficient of variation near 1)
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.3)
    assert 0.7 < statistics.pstdev(gaps) / statistics.fmean(gaps) < 1.3
    # and each request left when it was scheduled to
    lags = [r.send_time - r.scheduled_time for r in run.records]
    assert max(lags) < 0.02 and statistics.median(lags) < 0.003
    assert run.point.completed == 120 and run.point.arrival_lag is not None
    # the server saw them arrive at the planned times too
    arrivals = sorted(t["arrival"] for t in run.truth)
    planned = sorted(r.scheduled_time for r in run.records)
    assert max(abs(a - b) for a, b in zip(arrivals, planned, strict=True)) < 0.03


def test_open_loop_cap_holds_requests_back(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=100, itl_ms=10, output_tokens=3)]),
        {"prompts": RANDOM, "load": [{"kind": "rate", "rate": 100.0, "max_concurrency": 2}],
         "num_requests": 10},
    )  # fmt: skip
    assert _max_in_flight(run.truth) == 2
    assert run.point.completed == 10
    assert run.point.arrival_lag.max_ms > 200  # the last arrivals waited for a free slot


def test_sweep_runs_every_point(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=2, itl_ms=1, output_tokens=2)]),
        {"prompts": RANDOM, "num_requests": 6,
         "load": [{"kind": "concurrency", "concurrency": 1}, {"kind": "concurrency", "concurrency": 3},
                  {"kind": "rate", "rate": 50.0, "num_requests": 9}]},
    )  # fmt: skip
    assert [p.point for p in run.summary.points] == ["c1", "c3", "r50"]
    assert [p.completed for p in run.summary.points] == [6, 6, 9]
    assert Counter(r.point for r in run.records) == {"c1": 6, "c3": 6, "r50": 9}
    assert len({r.request_id for r in run.records}) == 21


def test_duration_stops_the_run_and_counts_in_flight_as_incomplete(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=50, itl_ms=100, output_tokens=8)]),  # 750 ms each
        {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 3}],
         "duration_s": 1.2, "warmup_s": 0.3},
    )  # fmt: skip
    p = run.point
    statuses = Counter(r.status for r in run.records)
    # 3 streams x 2 rounds started in 1.5 s; the second round is cut off mid-stream
    assert statuses == {"completed": 3, "incomplete": 3}
    assert p.warmup_excluded == 3 and p.incomplete == 3 and p.completed == 0
    cut = [r for r in run.records if r.status == "incomplete"]
    assert all(r.chunk_times and r.error == "in flight when the run ended" for r in cut)
    t0 = min(r.send_time for r in run.records)
    assert all(r.end_time - t0 == pytest.approx(1.5, abs=0.1) for r in cut)
    assert {t["outcome"] for t in run.truth} == {"completed", "client_gone"}


def test_open_loop_arrivals_waiting_at_the_end_count_as_incomplete(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=400, output_tokens=1)]),
        {"prompts": RANDOM, "load": [{"kind": "rate", "rate": 20.0, "max_concurrency": 1}],
         "duration_s": 1.0},
    )  # fmt: skip
    statuses = Counter(r.status for r in run.records)
    assert statuses["completed"] == 2 and statuses["incomplete"] >= 10
    assert sum(1 for r in run.records if r.error and "never sent" in r.error) >= 9
    assert len(run.truth) == 3  # two answered, one cut off


def test_error_accounting(bench) -> None:  # type: ignore[no-untyped-def]
    script = Script(
        behaviours=[
            Behaviour(name="ok", ttft_ms=5, itl_ms=2, output_tokens=4),
            Behaviour(name="500", status=500),
            Behaviour(name="cut", ttft_ms=5, itl_ms=2, output_tokens=8, close_after_tokens=3),
            Behaviour(name="hang", hang=True),
        ]
    )
    run = bench(
        script,
        {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 1}],
         "num_requests": 8, "timeout_s": 0.5},
        slo="error_rate<=0.1",
    )  # fmt: skip
    p = run.point
    assert (p.completed, p.failed, p.incomplete) == (2, 6, 0)
    by_behaviour = {t["request_id"]: t["behaviour"] for t in run.truth}
    errors = {by_behaviour[r.request_id]: r.error for r in run.records if r.status == "failed"}
    assert errors["500"].startswith("HTTP 500: ") and "scripted failure" in errors["500"]
    assert errors["cut"].startswith("stream broken after 3 chunks")
    assert errors["hang"] == "timeout: no response within 0.5 s"
    cut = next(r for r in run.records if by_behaviour[r.request_id] == "cut")
    assert len(cut.chunk_times) == 3  # what arrived before the break is kept
    assert p.error_rate == pytest.approx(0.75)
    assert p.slo[0].reason == "error_rate = 0.75 > 0.1"
    assert sum(p.errors.values()) == 6


def test_transformers_dialect(bench) -> None:  # type: ignore[no-untyped-def]
    """422 on unknown fields, usage always in the last chunk, no [DONE]."""
    script = Script(
        behaviours=[Behaviour(output_tokens=3)], usage="always", done_marker=False,
        strict_fields=True, strict_model=True,
    )  # fmt: skip
    workload = {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 2}],
                "num_requests": 4}  # fmt: skip
    good = bench(script, workload, engine="transformers")
    assert good.point.completed == 4 and {r.tokens_source for r in good.records} == {"usage"}
    assert all(r.output_tokens == 3 and r.prompt_tokens == 8 for r in good.records)
    bad = bench(script, workload, engine="vllm")  # sends stream_options: rejected
    assert bad.point.failed == 4
    assert "HTTP 422" in bad.records[0].error and "stream_options" in bad.records[0].error


def test_fixed_output_length_reaches_the_server(bench) -> None:  # type: ignore[no-untyped-def]
    workload = {"prompts": {**RANDOM, "output_len": 40}, "num_requests": 3,
                "load": [{"kind": "concurrency", "concurrency": 1}]}  # fmt: skip
    free = bench(Script(default_output_tokens=5), workload)
    fixed = bench(Script(default_output_tokens=5), {**workload, "fixed_output_length": True})
    assert {r.output_tokens for r in free.records} == {5}
    assert {r.output_tokens for r in fixed.records} == {40}


def test_counts_without_usage_fall_back_to_chunks(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(output_tokens=7)], usage="never", done_marker=False),
        {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 1}], "num_requests": 2},
    )
    assert {(r.output_tokens, r.tokens_source) for r in run.records} == {(7, "chunks")}
    assert all(r.prompt_tokens is None for r in run.records)
