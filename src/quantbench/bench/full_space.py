"""profiles/full-space.yaml's overrides, generated from the engines' registry.

The full setting space is every engine's ``full_sweep`` (the settings that matter on a CPU, each
engine's own declaration), the SLO-edge search instead of fixed loads, and every pair on its
engine's sweep rather than the pair's own settings. A test holds the shipped profile equal to
this, so a new engine (a plugin's included) is in the full space once it declares its sweep.

    python -m quantbench.bench.full_space    # the overrides, one per line
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quantbench.engines.registry import all_engines
from quantbench.params import read_params


def _flow(value: Any) -> str:
    """``value`` as YAML flow text, as `dvc exp run -S` (Hydra) reads it."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def full_space_overrides(params: Mapping[str, Any]) -> list[str]:
    """The `dvc exp run -S` overrides of the full setting space for ``params``."""
    out = ["bench.mode=search"]
    for name, engine in all_engines().items():
        if engine.full_sweep:
            out.append(f"++engines.{name}.sweep={_flow(engine.full_sweep)}")
    pairs = (params.get("bench") or {}).get("pairs") or {}
    out += [f"~bench.pairs.{name}.settings" for name, pair in pairs.items() if pair.get("settings")]
    return out


def main() -> None:
    print("\n".join(full_space_overrides(read_params("params.yaml"))))


if __name__ == "__main__":
    main()
