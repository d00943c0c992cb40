"""The closed-loop serving model: averages over the output, limits, and edge cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from quantbench.estimate.roofline import Rates, StepCosts
from quantbench.estimate.serving import ServingModel


def make(arch, input_len=64, output_len=32, memory=1e6, flops=1e6, bandwidth=1e5, overhead=0.0):
    costs = StepCosts(
        arch=arch,
        streamed_weight_bytes=2896.0,
        gathered_bytes_per_token=16.0,
        kv_bytes_per_token=32.0,
    )
    rates = Rates(
        compute_dtype="bf16",
        peak_flops=flops,
        peak_bandwidth=bandwidth,
        compute_efficiency=1.0,
        bandwidth_efficiency=1.0,
        step_overhead_s=overhead,
    )
    return ServingModel(
        costs=costs,
        rates=rates,
        input_len=input_len,
        output_len=output_len,
        stored_weight_bytes=2896.0,
        memory_bytes=memory,
    )


def test_decode_contexts_span_the_output(tiny):
    model = make(tiny, input_len=64, output_len=32)
    contexts = model.decode_contexts
    assert contexts[0] == 65 and contexts[-1] == 95 and len(contexts) == 31


def test_itl_is_the_mean_over_every_step(tiny):
    model = make(tiny)
    steps = [
        float((model.costs.weights() + model.costs.decode(1.0, float(c))).time(model.rates))
        for c in range(65, 96)
    ]
    assert model.itl_s(1) == pytest.approx(np.mean(steps))
    point = model.point(1, 1e9, 1e9)
    assert point.itl_first_ms == pytest.approx(steps[0] * 1e3)
    assert point.itl_last_ms == pytest.approx(steps[-1] * 1e3)
    assert point.itl_last_ms > point.itl_first_ms  # KV growth counts


def test_concurrency_one_has_no_interference_or_queue(tiny):
    model = make(tiny)
    point = model.point(1, 1e9, 1e9)
    assert point.itl_ms == pytest.approx(point.itl_decode_only_ms)
    assert point.ttft_ms == pytest.approx(float(model.prompt_alone().time(model.rates)) * 1e3)
    assert point.e2e_s == pytest.approx(point.ttft_ms / 1e3 + 31 * point.itl_ms / 1e3)
    assert point.output_tps == pytest.approx(32 / point.e2e_s)


def test_more_concurrency_means_slower_requests_but_more_throughput(tiny):
    model = make(tiny)
    points = [model.point(c, 1e9, 1e9) for c in (1, 2, 4, 8)]
    assert all(a.itl_ms < b.itl_ms for a, b in itertools.pairwise(points))
    assert all(a.ttft_ms < b.ttft_ms for a, b in itertools.pairwise(points))
    assert all(a.output_tps < b.output_tps for a, b in itertools.pairwise(points))
    # prompts of other requests are mixed into decode steps
    assert points[-1].itl_ms > points[-1].itl_decode_only_ms


def test_kv_memory_limit_by_hand(tiny):
    model = make(tiny, input_len=64, output_len=32, memory=2896.0 + 10 * 96 * 32 + 5)
    assert model.kv_memory_limit() == 10
    assert model.point(10, 1e9, 1e9).fits_memory
    assert not model.point(11, 1e9, 1e9).fits_memory


def test_slo_limits_are_the_largest_concurrency_meeting_them(tiny):
    model = make(tiny)
    ttft_slo = model.point(6, 1e9, 1e9).ttft_ms
    itl_slo = model.point(9, 1e9, 1e9).itl_ms
    limits = model.limits(ttft_slo, itl_slo)
    assert limits.prefill_compute == 6
    assert limits.decode == 9
    assert limits.overall == min(limits.kv_memory, 6, 9)
    assert limits.binding == "prefill_compute"


def test_slo_missed_even_alone_gives_zero(tiny):
    model = make(tiny)
    assert model.limits(1e-9, 1e9).prefill_compute == 0


def test_decode_turns_compute_bound_where_the_closed_form_says(tiny):
    model = make(tiny, flops=2e5, bandwidth=1e5)
    start = model.decode_compute_bound_from()
    assert start is not None and start > 1

    def bound(c):
        steps = model.decode_steps(c, mixed=False)
        return (
            float(np.mean(steps.flops)) / model.rates.flops
            >= float(np.mean(steps.bytes)) / model.rates.bandwidth
        )

    assert bound(start) and not bound(start - 1)
    # with ample compute it never does
    assert make(tiny, flops=1e12).decode_compute_bound_from() is None


def test_single_output_token_has_no_decode_phase(tiny):
    model = make(tiny, output_len=1)
    assert model.decode_phase() is None
    point = model.point(4, 1e9, 1e9)
    assert point.itl_ms is None and point.e2e_s == pytest.approx(point.ttft_ms / 1e3)


def test_overhead_adds_to_every_step(tiny):
    plain, slow = make(tiny), make(tiny, overhead=0.01)
    assert slow.itl_s(1) - plain.itl_s(1) == pytest.approx(0.01)


def test_concurrency_must_be_positive(tiny):
    with pytest.raises(ValueError, match="concurrency 0"):
        make(tiny).point(0, 1e9, 1e9)


def test_an_engine_that_serves_one_at_a_time_queues_the_rest(tiny):
    # transformers serve without continuous batching: four clients are one running request and
    # three in its queue. The estimate used to batch all four, 2-4x too optimistic in throughput.
    import dataclasses

    batching = make(tiny, overhead=0.002)
    serial = dataclasses.replace(batching, max_batch=1)
    one = serial.point(1, 1e9, 1e9)
    four = serial.point(4, 1e9, 1e9)
    assert four.running == 1 and one.running == 1
    assert four.itl_ms == pytest.approx(one.itl_ms)  # a running request decodes alone
    assert four.output_tps == pytest.approx(one.output_tps)  # no more tokens for more clients
    e2e_one = one.e2e_s * 1e3
    assert four.queue_wait_ms == pytest.approx(3 * e2e_one)  # E2E_m * (B/m - 1)
    assert four.ttft_ms == pytest.approx(one.ttft_ms + 3 * e2e_one)
    assert batching.point(4, 1e9, 1e9).output_tps > 1.5 * four.output_tps


def test_slots_cap_the_batch_and_below_them_nothing_changes(tiny):
    import dataclasses

    free = make(tiny, overhead=0.002)
    slots = dataclasses.replace(free, max_batch=4)
    for c in (1, 2, 4):
        assert slots.point(c, 1e9, 1e9) == free.point(c, 1e9, 1e9).model_copy(update={"running": c})
    eight = slots.point(8, 1e9, 1e9)
    at_four = free.point(4, 1e9, 1e9)
    assert eight.itl_ms == pytest.approx(at_four.itl_ms)
    assert eight.output_tps == pytest.approx(at_four.output_tps)
    assert eight.queue_wait_ms == pytest.approx(at_four.e2e_s * 1e3)  # 8/4 - 1 = one service
    assert eight.kv_cache_gb == pytest.approx(at_four.kv_cache_gb)  # queued requests hold none
    # the TTFT limit counts the queue: more clients than slots only wait longer
    limit = slots.limits(ttft_slo_ms=at_four.ttft_ms * 1.5, itl_slo_ms=1e9)
    assert 4 <= limit.prefill_compute < 8


def test_think_times_keep_clients_away_and_the_cycle_counts_them(tiny):
    from dataclasses import replace

    from quantbench.schemas.step_fit import StepFit

    fit = StepFit(
        request_ms=20.0, prefill_ms_per_token=0.0, shared_step_ms=10.0, own_step_ms=10.0,
        context_ms_per_token=0.0, reference_context=80.0, batch_measured=4,
    )  # fmt: skip
    base = replace(make(tiny, input_len=64, output_len=11), fit=fit)
    busy = base.point(4, 1e9, 1e9)
    assert busy.itl_ms == pytest.approx(50.0)  # four running: 10 + 4 x 10
    thinking = replace(base, think_s=0.2)
    point = thinking.point(4, 1e9, 1e9)
    # the fixed point: b = 4 E2E(b) / (E2E(b) + 0.2 s), E2E(b) = TTFT(b) + 10 (10 + 10 b) ms
    b = thinking.in_flight(4)
    e2e = point.e2e_s
    assert b == pytest.approx(4 * e2e / (e2e + 0.2), rel=1e-3)
    assert 1 < b < 4
    assert point.itl_ms == pytest.approx(10 + 10 * b)
    assert point.output_tps == pytest.approx(4 * 11 / (e2e + 0.2))
    assert point.output_tps < busy.output_tps


def test_a_prefix_cache_leaves_only_the_new_tokens_to_prefill(tiny):
    from dataclasses import replace

    model = make(tiny, input_len=400, output_len=32)
    cached = replace(model, prefill_len=40)
    assert cached.point(1, 1e9, 1e9).ttft_ms < model.point(1, 1e9, 1e9).ttft_ms
    assert cached.itl_s(4) < model.itl_s(4)  # others' prompts carry fewer tokens
    assert cached.itl_s(1) == pytest.approx(model.itl_s(1))  # alone, nothing rides along
