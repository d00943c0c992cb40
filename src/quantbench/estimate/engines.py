"""Engine-specific corrections to the roofline: which engine runs a variant, what it adds.

What an engine adds is the engine's own to say (its module under ``quantbench.engines``); this
module asks the registry, so a plugin engine is estimated like a built-in one:

* per-step overhead: an eager engine adds a fixed cost per forward step (Python, op dispatch,
  sampling) that for a small model on a CPU is as large as the weight streaming itself. An engine
  with ``overhead_probe`` measures it once per machine (the ``calibrate`` stage): transformers
  times greedy ``generate`` on a tiny Llama whose matmuls cost nothing, at two layer counts, so
  ``per_step + layers * per_layer`` extends to any depth. llama.cpp runs a compiled graph and
  vLLM replays CUDA graphs, whose per-step costs are small beside their kernels: 0 for them;
* kernel efficiencies: where an engine's kernels cannot be probed through torch (llama.cpp's
  quantised dot products on a CPU), named efficiencies relative to the measured figures stand
  in, with their provenance; the comparison's fit replaces them once the benchmark has run;
* which engine ``auto`` models: each engine's preference for the kind of device.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantbench.engines.base import KernelEfficiency
from quantbench.engines.registry import all_engines
from quantbench.estimate import machine
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.formats import nominal_weight_bytes
from quantbench.estimate.spec import AUTO, engine_choices
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.hardware import HardwareSpec
from quantbench.schemas.roofline import ModelShape

if TYPE_CHECKING:
    from quantbench.engines.base import Engine
    from quantbench.schemas.roofline import WeightBytes


def canonical(engine: str) -> str:
    """The registered name of an engine given by one of its aliases (``llama.cpp``)."""
    for name, spec in all_engines().items():
        if engine in spec.aliases:
            return name
    return engine


def _engine(name: str) -> Engine | None:
    return all_engines().get(canonical(name))


def held_weights(
    engine: str,
    arch: ModelShape,
    variant: EstimatedVariant,
    weights: WeightBytes,
    settings: Any = None,
) -> WeightBytes:
    """The weights as ``engine`` holds and reads them: the variant's own bytes, or (where the
    engine converts the checkpoint when it loads it) the nominal bytes of the layout it holds.
    ``settings``: the server point's engine settings, where known (its dtype: a bf16 checkpoint
    served in float32 is held as fp32, twice the bytes, computed in fp32)."""
    found = _engine(engine)
    held = found.holds_as(variant.format, settings) if found is not None else None
    if held is None or held == variant.format:
        return weights

    as_held = nominal_weight_bytes(arch, EstimatedVariant(name=variant.name, format=held))
    return as_held.model_copy(
        update={
            "detail": f"{variant.format} held as {held} by {found.name if found else engine} "
            f"(converted when loaded; stored file: {weights.stored_bytes / 1e6:.1f} MB): "
            + as_held.detail
        }
    )


def kernel_efficiency(engine: str, hardware: HardwareSpec) -> KernelEfficiency | None:
    """The engine's stand-in kernel efficiencies on this kind of device, if it has any."""
    found = _engine(engine)
    return found.kernel_efficiency(hardware.kind) if found is not None else None


def resolve_engine(engine: str, weight_format: str, hardware: HardwareSpec) -> str:
    """The engine an estimate models: explicit, or ``auto``: of the engines that serve the
    format (all of them for a format none serves, such as fp16), the one that prefers this kind
    of device most (each engine says so: ``Engine.estimate_preference``)."""
    engine = canonical(engine)
    choices = engine_choices()
    if engine not in choices:
        raise EstimateInputError(f"engine {engine!r} is not known; use one of {choices}")
    if engine != AUTO:
        return engine
    engines = list(all_engines().values())
    serving = [e for e in engines if e.serves(weight_format)] or engines
    return max(serving, key=lambda e: e.estimate_preference(hardware.kind)).name


def step_overhead(hardware: HardwareSpec, engine: str, arch: ModelShape) -> tuple[float, str]:
    """(overhead ms per step, where it comes from) for ``engine`` on ``hardware``."""
    engine = canonical(engine)
    measured = hardware.measurement.engine_overheads if hardware.measurement else {}
    if engine in measured:
        o = measured[engine]
        total = o.per_step_ms + arch.num_layers * o.per_layer_ms
        return total, (
            f"{engine} overhead measured here: {o.per_step_ms:.2f} ms/step + "
            f"{arch.num_layers} x {o.per_layer_ms:.3f} ms/layer = {total:.2f} ms/step"
        )
    return 0.0, f"no {engine} overhead measured on {hardware.name}: pure roofline (0 ms/step)"


def add_engine_overhead(hardware: HardwareSpec, engine: str) -> HardwareSpec:
    """A measured spec with the engine's overhead measured and added (nothing saved)."""
    found = _engine(engine)
    measurement = hardware.measurement
    if measurement is None or found is None or not found.overhead_probe:
        return hardware
    if found.name in measurement.engine_overheads:
        return hardware
    overhead = found.measure_overhead(measurement.threads)
    if overhead is None:
        return hardware
    overheads = {**measurement.engine_overheads, found.name: overhead}
    return hardware.model_copy(
        update={"measurement": measurement.model_copy(update={"engine_overheads": overheads})}
    )


def with_engine_overhead(
    hardware: HardwareSpec, engine: str, cache_dir: Path | None = None
) -> HardwareSpec:
    """:func:`add_engine_overhead`, and the result cached (``quantbench estimate`` on its own)."""
    updated = add_engine_overhead(hardware, engine)
    if updated is not hardware:
        machine.save_measured(updated, cache_dir)
    return updated
