"""Timing accuracy against the fake server's truth log, at 1, 16 and 64 concurrent streams.

The server stamps each chunk just before writing it, so truth is when a token left the server;
the harness measures when it arrived. Truth TTFT is (server first-chunk time - client send time),
truth ITL the gaps between server chunk times: server scheduling jitter is in both, and only the
harness's own delay remains in the difference.
"""

from __future__ import annotations

import numpy as np
import pytest

from quantbench.mock_server import Behaviour, Script

# timing: the harness's own clock against a scripted server's, to the millisecond: run alone
pytestmark = [pytest.mark.server, pytest.mark.timing]

# A CPU model server's pace: TTFT 40-80 ms, gaps of 15-35 ms, 24 tokens.
SCHEDULE = Script(
    behaviours=[
        Behaviour(name="a", ttft_ms=[40, 60, 80], itl_ms=[15, 25, 35, 20], output_tokens=24),
        Behaviour(name="b", ttft_ms=[50, 70], itl_ms=[30, 15, 20], output_tokens=24),
    ]
)


@pytest.mark.parametrize("streams", [1, 16, 64])
def test_measured_ttft_and_itl_match_the_truth(bench, streams: int) -> None:  # type: ignore[no-untyped-def]
    n = max(8, 3 * streams)
    run = bench(
        SCHEDULE,
        {"prompts": {"source": "random", "input_len": 8, "output_len": 24, "num_prompts": 8},
         "load": [{"kind": "concurrency", "concurrency": streams}], "num_requests": n},
    )  # fmt: skip
    truth = run.truth_by_id()
    measured = [r for r in run.records if r.phase == "measured"]
    assert run.point.completed == n and len(measured) == n
    ttft_m, ttft_t, itl_m, itl_t = [], [], [], []
    for r in measured:
        t = truth[r.request_id]
        assert len(r.chunk_times) == len(t["chunk_times"]) == r.output_tokens == 24
        ttft_m.append(r.ttft)
        ttft_t.append(t["chunk_times"][0] - r.send_time)
        itl_m += r.itls
        itl_t += np.diff(t["chunk_times"]).tolist()
    assert run.point.total_output_tokens == 24 * n
    # The tail's budget is 5 ms, unless the load process itself saw its event loop wake later
    # than that (its own lateness, measured every 10 ms and reported with the point): then the
    # delay is known and reported, and the tail may be off by as much, never more. On a 2-vCPU
    # guest (an AMX Xeon, 2026-11-27) the client, at 30 % of a core, was not run for 12-24 ms now
    # and then, once in every run, and one run in two put such a pause on a first token.
    stall = max(m["loop_lag"]["max_ms"] for m in run.load_meta.values())
    budget = max(5.0, stall)
    for name, m, t in (("ttft", ttft_m, ttft_t), ("itl", itl_m, itl_t)):
        m_ms, t_ms = np.asarray(m) * 1000, np.asarray(t) * 1000
        p50 = abs(np.percentile(m_ms, 50) - np.percentile(t_ms, 50))
        p99 = abs(np.percentile(m_ms, 99) - np.percentile(t_ms, 99))
        err = np.abs(m_ms - t_ms)
        print(f"{streams} streams {name}: |p50 diff| {p50:.3f} ms, |p99 diff| {p99:.3f} ms; "
              f"per-request error p50 {np.percentile(err, 50):.3f} p99 {np.percentile(err, 99):.3f}; "
              f"the client's longest stall {stall:.1f} ms")  # fmt: skip
        assert p50 <= 1.0, f"{name} p50 off by {p50:.3f} ms"
        assert np.percentile(err, 50) <= 1.0
        assert p99 <= budget, f"{name} p99 off by {p99:.3f} ms (client stalled {stall:.1f} ms)"
        # each request, not only the distribution: streams that end together (closed loop,
        # equal lengths) must not hold the others' chunks back while their records are written
        assert np.percentile(err, 99) <= budget, (
            f"{name}: 1 request in 100 off by more than {budget:.1f} ms, beyond the longest "
            f"stall the load process saw of itself ({stall:.1f} ms): a delay it did not report"
        )
    # the lateness is in the point's own figures, where the report reads it
    assert run.point.harness.loop_lag_p99_ms is not None
