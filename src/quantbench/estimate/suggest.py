"""Sweep grids per engine, derived from the concurrency limits, in the params format.

The estimate only brackets where the interesting region lies; the benchmark decides. Grids
therefore centre on the binding limit (the largest concurrency the SLOs and memory allow),
extend one doubling past it so the saturation knee is visible, and never exceed what the KV
cache can hold.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from quantbench.estimate.serving import ConcurrencyLimits

# Smallest per-step token budget suggested to vLLM (its chunked-prefill default region
# starts at 2048 tokens; smaller budgets starve prompts).
VLLM_MIN_BATCHED_TOKENS = 2048
# Multiples of the base token budget to try: whole prompts per step, then two and four.
VLLM_BATCHED_TOKEN_MULTIPLES = (1, 2, 4)
# Context sizes are rounded up to a multiple of this many tokens (llama.cpp and vLLM allocate
# the KV cache in blocks; a round figure also reads better in params.yaml).
CONTEXT_ROUNDING = 256


class SuggestedGrids(BaseModel):
    """Client load points and per-engine server settings to sweep."""

    model_config = ConfigDict(extra="forbid")

    concurrency: list[int] = Field(description="client concurrency levels to load-test")
    engines: dict[str, dict[str, list[int] | list[bool]]] = Field(
        description="per engine: setting -> values, ready for params.yaml"
    )
    rationale: list[str]


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _powers_of_two(upto: int) -> list[int]:
    values, p = [], 1
    while p <= upto:
        values.append(p)
        p *= 2
    return values or [1]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def suggest_grids(limits: ConcurrencyLimits, input_len: int, output_len: int) -> SuggestedGrids:
    """Grids for vLLM, llama.cpp and transformers from the limits of one estimate.

    Besides the swept settings, each engine gets the one context size every grid point needs
    (a single-value list): llama.cpp's ``ctx_size`` is shared by its slots, so it must hold
    the largest ``parallel`` times a full request; vLLM's ``max_model_len`` one request.
    """
    kv_cap = max(1, limits.kv_memory)
    centre = _next_pow2(max(1, limits.overall))
    rationale = [
        f"binding limit: {limits.binding} = {limits.overall} concurrent requests",
        f"KV cache holds {limits.kv_memory} full-length requests",
    ]
    if limits.overall == 0:
        rationale.append("even one request misses an SLO: grids stay at the smallest settings")

    concurrency = [c for c in _powers_of_two(2 * centre) if c <= kv_cap]
    max_num_seqs = sorted({min(kv_cap, max(1, v)) for v in (centre // 2, centre, 2 * centre)})
    base_tokens = max(VLLM_MIN_BATCHED_TOKENS, _next_pow2(input_len), max(max_num_seqs))
    batched_tokens = [base_tokens * m for m in VLLM_BATCHED_TOKEN_MULTIPLES]
    parallel = [c for c in _powers_of_two(centre) if c <= kv_cap]
    continuous: list[bool] = [False, True] if limits.overall >= 2 else [False]
    request_tokens = input_len + output_len
    rationale.append(
        f"vLLM token budget starts at max({VLLM_MIN_BATCHED_TOKENS}, prompt rounded up to a "
        "power of two) so a whole prompt fits one step"
    )
    return SuggestedGrids(
        concurrency=concurrency,
        engines={
            "vllm": {
                "max_num_seqs": max_num_seqs,
                "max_num_batched_tokens": batched_tokens,
                "max_model_len": [_round_up(request_tokens, CONTEXT_ROUNDING)],
            },
            "llamacpp": {
                "parallel": parallel,
                "ctx_size": [_round_up(max(parallel) * request_tokens, CONTEXT_ROUNDING)],
            },
            "transformers": {"continuous_batching": continuous},
        },
        rationale=rationale,
    )
