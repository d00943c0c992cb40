"""Step FLOPs and bytes counted by hand on the tiny config, and roofline times."""

from __future__ import annotations

import numpy as np
import pytest

from quantbench.estimate.roofline import Cost, Rates, StepCosts

# bf16 tiny: 2896 streamed bytes, 16 gathered bytes per token, 32 KV bytes per token
STREAMED, GATHERED, KV = 2896.0, 16.0, 32.0


@pytest.fixture
def costs(tiny) -> StepCosts:
    return StepCosts(
        arch=tiny,
        streamed_weight_bytes=STREAMED,
        gathered_bytes_per_token=GATHERED,
        kv_bytes_per_token=KV,
    )


def rates(flops: float = 1e3, bandwidth: float = 1e3, overhead_s: float = 0.0) -> Rates:
    return Rates(
        compute_dtype="bf16",
        peak_flops=flops,
        peak_bandwidth=bandwidth,
        compute_efficiency=1.0,
        bandwidth_efficiency=1.0,
        step_overhead_s=overhead_s,
    )


def test_per_token_flops(costs):
    assert costs.body_flops_per_token == 2 * 1152
    assert costs.head_flops_per_token == 2 * 256
    # 4 x layers 2 x heads 2 x head_dim 4 per attended position
    assert costs.attention_flops(10.0) == 64 * 10


def test_decode_step_by_hand(costs):
    step = costs.weights() + costs.decode(3.0, 10.0)
    assert step.flops == 3 * (2304 + 512 + 640)
    assert step.bytes == STREAMED + 3 * (GATHERED + 11 * KV)


def test_decode_over_an_output_grows_with_context(costs):
    contexts = np.arange(5.0, 9.0)
    step = costs.weights() + costs.decode(1.0, contexts)
    assert np.all(np.diff(step.flops) == 64) and np.all(np.diff(step.bytes) == KV)


def test_prompt_by_hand(costs):
    prompt = costs.prompt(4)
    # causal: token i attends i positions, mean (4 + 1) / 2; logits for the last token only
    assert prompt.flops == 4 * (2304 + 64 * 2.5) + 512
    # weights once, then per token its embedding row and one K/V write and read
    assert prompt.bytes == STREAMED + 4 * (GATHERED + 2 * KV)


def test_weights_are_shared_by_the_tokens_of_a_step(costs):
    one = costs.weights() + costs.decode(1.0, 10.0)
    eight = costs.weights() + costs.decode(8.0, 10.0)
    assert eight.bytes < 8 * one.bytes
    assert eight.intensity() > 4 * one.intensity()


def test_time_is_the_slower_roof_plus_overhead():
    cost = Cost(flops=2000.0, bytes=500.0)
    assert cost.time(rates()) == 2.0
    assert cost.compute_bound(rates())
    assert cost.time(rates(flops=1e4)) == 0.5
    assert not cost.compute_bound(rates(flops=1e4))
    assert cost.time(rates(overhead_s=0.25)) == 2.25


def test_efficiencies_scale_the_peaks():
    r = Rates(
        compute_dtype="bf16",
        peak_flops=100.0,
        peak_bandwidth=10.0,
        compute_efficiency=0.5,
        bandwidth_efficiency=0.8,
        step_overhead_s=0.0,
    )
    assert (r.flops, r.bandwidth) == (50.0, 8.0)
    assert r.peak_ops_per_byte == 10.0
    assert r.ops_per_byte == 50.0 / 8.0
