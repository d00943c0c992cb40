"""A Locust master and worker processes run one plan; their records merge into one file."""

from __future__ import annotations

from collections import Counter

import pytest

from quantbench.mock_server import Behaviour, Script

pytestmark = pytest.mark.server

RANDOM = {"source": "random", "input_len": 8, "output_len": 6, "num_prompts": 16}


def test_two_workers_closed_loop(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=10, itl_ms=5, output_tokens=5)]),
        {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 4}],
         "num_requests": 30, "warmup_requests": 2, "workers": 2},
    )  # fmt: skip
    assert run.point.completed == 30 and run.point.warmup_excluded == 2
    assert sorted(r.index for r in run.records) == list(range(32))
    assert Counter(r.worker for r in run.records) == {0: 16, 1: 16}
    assert {r.request_id for r in run.records} == {t["request_id"] for t in run.truth}
    assert run.point.total_output_tokens == 150


def test_two_workers_open_loop_keep_the_schedule(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=5, output_tokens=2)]),
        {"prompts": RANDOM, "load": [{"kind": "rate", "rate": 30.0}], "num_requests": 40,
         "workers": 2},
    )  # fmt: skip
    assert run.point.completed == 40
    lags = sorted(r.send_time - r.scheduled_time for r in run.records)
    assert lags[-1] < 0.05  # both workers started on the same clock
    assert {r.worker for r in run.records} == {0, 1}
