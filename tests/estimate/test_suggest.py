"""Sweep grids from concurrency limits."""

from __future__ import annotations

from quantbench.engines.vllm import MIN_BATCHED_TOKENS as VLLM_MIN_BATCHED_TOKENS
from quantbench.estimate.suggest import suggest_grids
from quantbench.schemas.roofline import ConcurrencyLimits


def limits(kv=1000, prefill=500, decode=23):
    values = {"kv_memory": kv, "prefill_compute": prefill, "decode": decode}
    binding = min(values, key=values.__getitem__)
    return ConcurrencyLimits(
        **values, overall=values[binding], binding=binding, decode_compute_bound_from=None
    )


def test_grids_bracket_the_binding_limit():
    grids = suggest_grids(limits(decode=23), input_len=1024, output_len=512)
    assert grids.concurrency == [1, 2, 4, 8, 16, 32, 64]
    assert grids.engines["vllm"]["max_num_seqs"] == [16, 32, 64]
    assert grids.engines["vllm"]["max_num_batched_tokens"] == [2048, 4096, 8192]
    assert grids.engines["llamacpp"]["parallel"] == [1, 2, 4, 8, 16, 32]
    assert grids.engines["transformers"]["continuous_batching"] == [False, True]
    # every slot holds a full request of 1536 tokens
    assert grids.engines["llamacpp"]["ctx_size"] == [32 * 1536]
    assert grids.engines["vllm"]["max_model_len"] == [1536]


def test_context_sizes_round_up():
    grids = suggest_grids(limits(decode=1), input_len=100, output_len=50)
    assert grids.engines["llamacpp"]["ctx_size"] == [256]
    assert grids.engines["vllm"]["max_model_len"] == [256]


def test_grids_never_exceed_the_kv_cache():
    grids = suggest_grids(limits(kv=5, prefill=500, decode=400), input_len=128, output_len=64)
    assert max(grids.concurrency) <= 5
    assert max(grids.engines["vllm"]["max_num_seqs"]) <= 5
    assert max(grids.engines["llamacpp"]["parallel"]) <= 5


def test_long_prompts_raise_the_token_budget():
    grids = suggest_grids(limits(), input_len=5000, output_len=100)
    assert grids.engines["vllm"]["max_num_batched_tokens"][0] == 8192 > VLLM_MIN_BATCHED_TOKENS


def test_nothing_meets_the_slo():
    grids = suggest_grids(limits(prefill=0), input_len=1024, output_len=512)
    assert grids.concurrency == [1, 2]
    assert grids.engines["llamacpp"]["parallel"] == [1]
    assert grids.engines["transformers"]["continuous_batching"] == [False]
    assert any("misses an SLO" in line for line in grids.rationale)
