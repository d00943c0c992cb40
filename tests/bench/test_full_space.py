"""profiles/full-space.yaml is generated from the engines' declared full sweeps."""

from __future__ import annotations

from pathlib import Path

from quantbench.bench.full_space import _flow, full_space_overrides
from quantbench.cli.plan import profile_overrides
from quantbench.engines.registry import all_engines
from quantbench.params import read_params

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_profile_is_the_generated_one() -> None:
    shipped = profile_overrides(REPO / "profiles/full-space.yaml")
    assert shipped == full_space_overrides(read_params(REPO / "params.yaml")), (
        "profiles/full-space.yaml differs from `python -m quantbench.bench.full_space`"
    )


def test_every_engine_that_declares_a_full_sweep_is_in_it() -> None:
    overrides = full_space_overrides({"bench": {"pairs": {"a": {"settings": {"x": 1}}, "b": {}}}})
    for name, engine in all_engines().items():
        assert (f"++engines.{name}.sweep={_flow(engine.full_sweep)}" in overrides) == bool(
            engine.full_sweep
        )
    assert overrides[0] == "bench.mode=search" and overrides[-1] == "~bench.pairs.a.settings"
    assert _flow({"k": [True, None, "auto", 2]}) == "{k: [true, null, auto, 2]}"
