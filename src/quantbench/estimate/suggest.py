"""Sweep grids per engine, derived from the concurrency limits, in the params format.

The estimate only brackets where the interesting region lies; the benchmark decides. Grids
therefore centre on the binding limit (the largest concurrency the SLOs and memory allow),
extend one doubling past it so the saturation knee is visible, and never exceed what the KV
cache can hold.
"""

from __future__ import annotations

from quantbench.engines.registry import all_engines
from quantbench.schemas.roofline import ConcurrencyLimits, SuggestedGrids


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _powers_of_two(upto: int) -> list[int]:
    values, p = [], 1
    while p <= upto:
        values.append(p)
        p *= 2
    return values or [1]


def suggest_grids(limits: ConcurrencyLimits, input_len: int, output_len: int) -> SuggestedGrids:
    """Client concurrencies, and per engine its own suggestion (``Engine.suggest_sweep``), from
    the limits of one estimate: centred on the binding limit, one doubling past it, never more
    than the KV cache holds."""
    kv_cap = max(1, limits.kv_memory)
    centre = _next_pow2(max(1, limits.overall))
    rationale = [
        f"binding limit: {limits.binding} = {limits.overall} concurrent requests",
        f"KV cache holds {limits.kv_memory} full-length requests",
    ]
    if limits.overall == 0:
        rationale.append("even one request misses an SLO: grids stay at the smallest settings")
    concurrency = [c for c in _powers_of_two(2 * centre) if c <= kv_cap]
    engines = {
        name: grid
        for name, engine in all_engines().items()
        if (grid := engine.suggest_sweep(centre, kv_cap, input_len, output_len))
    }
    rationale.append(
        "each engine suggests its own settings around that centre (Engine.suggest_sweep); vLLM's "
        "token budget starts at max(2048, prompt rounded up to a power of two)"
    )
    return SuggestedGrids(concurrency=concurrency, engines=engines, rationale=rationale)
