"""Engines by name, and the valid (variant, engine) pairs that later stages benchmark."""

from __future__ import annotations

from collections.abc import Mapping

from quantbench.engines.base import Engine
from quantbench.engines.llamacpp import LlamaCppEngine
from quantbench.engines.spec import EnginesSettings
from quantbench.engines.transformers import TransformersEngine
from quantbench.engines.vllm import VllmEngine
from quantbench.errors import UserError

ENGINES: dict[str, Engine] = {
    e.name: e for e in (TransformersEngine(), VllmEngine(), LlamaCppEngine())
}


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise UserError(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)}")
    return ENGINES[name]


def engines_for(fmt: str) -> list[str]:
    return [name for name, engine in ENGINES.items() if engine.serves(fmt)]


def check_pair(variant: str, fmt: str, engine: str) -> None:
    """Refuse an impossible pair, saying which engines do serve that format."""
    if not get_engine(engine).serves(fmt):
        raise UserError(
            f"engine {engine!r} cannot serve variant {variant!r} (format {fmt}); "
            f"engines that serve {fmt}: {', '.join(engines_for(fmt)) or 'none'}"
        )


def valid_pairs(
    variant_formats: Mapping[str, str], settings: EnginesSettings
) -> list[tuple[str, str]]:
    """Every (variant, engine) pair where the engine is enabled and serves the variant's format."""
    pairs = []
    for variant, fmt in variant_formats.items():
        for name, engine in ENGINES.items():
            if getattr(settings, name).enabled and engine.serves(fmt):
                pairs.append((variant, name))
    return pairs
