"""What each bench pair should measure: the estimate at every point the bench will run there.

The variant-level estimate answers "what can this variant do on this hardware"; a measured row
answers "what did this engine, with this setting, under this workload, deliver". To put the two
side by side like with like, the estimate stage also predicts, on this machine, every bench pair
(variant x engine) at every server setting of its sweep, for every closed-loop workload at that
workload's own mean lengths (as generated), at the concurrencies the bench measures and at 1-16
(where a search may go):

* the bytes as the engine holds them (``held_weights``: transformers holds AWQ as bf16);
* the engine's overhead and kernel efficiencies as calibrated;
* how many requests the engine runs at once with that setting (``Engine.max_batch``: llama.cpp's
  slots, vLLM's ``max_num_seqs``, one for ``transformers serve`` without continuous batching);
  more clients than that wait in its queue (``ServingModel``).

The report matches each measured row by (pair, setting, workload, concurrency).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from quantbench.engines.base import EngineSettings
from quantbench.engines.registry import get_engine, pair_settings
from quantbench.estimate.arch import ModelShape
from quantbench.estimate.checkpoint import variant_weight_bytes
from quantbench.estimate.engines import canonical, held_weights
from quantbench.estimate.estimator import serving_model
from quantbench.estimate.hardware import HardwareSpec
from quantbench.estimate.serving import ConcurrencyPoint
from quantbench.estimate.spec import EstimatedVariant, EstimateSettings
from quantbench.load.spec import ClosedLoop, WorkloadSpec

SEARCH_RANGE = range(1, 17)
"""Concurrencies predicted beside the measured ones: where an SLO-edge search may probe."""


@dataclass(frozen=True)
class BenchPair:
    """A bench pair as the estimate needs it: its variant, engine and engine settings (with the
    pair's own settings laid over the engine's section, its sweep included)."""

    variant: str
    engine: str
    settings: EngineSettings


@dataclass(frozen=True)
class WorkloadShape:
    """A closed-loop workload as generated: mean prompt and output tokens, measured loads."""

    input_len: int
    output_len: int
    concurrencies: tuple[int, ...]


class PairPrediction(BaseModel):
    """The estimate for one pair, server setting and workload, at each concurrency."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pair: str
    variant: str
    engine: str
    server_point: str = Field(description="the setting's label, as the bench names it")
    workload: str
    hardware_name: str
    max_batch: int | None = Field(description="requests the engine runs at once (None: all)")
    input_len: int
    output_len: int
    points: list[ConcurrencyPoint]

    def at(self, concurrency: int) -> ConcurrencyPoint | None:
        return next((p for p in self.points if p.concurrency == concurrency), None)


def predict_pairs(
    arch: ModelShape,
    model_dir: Path,
    variants: Mapping[str, EstimatedVariant],
    pairs: Mapping[str, BenchPair],
    workloads: Mapping[str, WorkloadShape],
    hardware_name: str,
    hardware: HardwareSpec,
    settings: EstimateSettings,
) -> list[PairPrediction]:
    """Every pair x setting x workload at its concurrencies (pairs of unknown variants skipped:
    params validation refuses them before this runs)."""
    slo = settings.slo
    out: list[PairPrediction] = []
    stored = {  # read once per variant, whichever engines serve it
        name: variant_weight_bytes(arch, variants[name], Path(model_dir))
        for name in {pair.variant for pair in pairs.values()} & set(variants)
    }
    for name, pair in pairs.items():
        variant = variants.get(pair.variant)
        if variant is None:
            continue
        engine = canonical(pair.engine)
        held = held_weights(engine, arch, variant, stored[pair.variant])
        for label, point_settings in pair.settings.sweep_points():
            max_batch = get_engine(pair.engine).max_batch(point_settings)
            for workload, shape in workloads.items():
                serving = serving_model(
                    arch, held, hardware, settings, shape.input_len, shape.output_len,
                    engine, max_batch,
                )  # fmt: skip
                levels = sorted(set(shape.concurrencies) | set(SEARCH_RANGE))
                out.append(
                    PairPrediction(
                        pair=name,
                        variant=pair.variant,
                        engine=pair.engine,
                        server_point=label,
                        workload=workload,
                        hardware_name=hardware_name,
                        max_batch=max_batch,
                        input_len=shape.input_len,
                        output_len=shape.output_len,
                        points=[serving.point(c, slo.ttft_ms, slo.itl_ms) for c in levels],
                    )
                )
    return out


def bench_pairs(
    params: Mapping[str, Any], pairs: Mapping[str, Any], origin: str = "params.yaml"
) -> dict[str, BenchPair]:
    """``bench.pairs`` (validated ``Pair`` entries) with each pair's engine settings laid over its
    engine's section (``engines.registry.pair_settings``), as the bench stages will run them."""
    return {
        name: BenchPair(pair.variant, pair.engine, pair_settings(params, name, pair, origin))
        for name, pair in pairs.items()
    }


def workload_shapes(
    workloads: Mapping[str, WorkloadSpec], summaries: Mapping[str, Mapping[str, Any]]
) -> dict[str, WorkloadShape]:
    """Each workload with a generated traffic summary: its mean lengths and the concurrencies of
    its closed-loop points (none for an open loop: its prediction still spans 1-16)."""
    shapes = {}
    for name, spec in workloads.items():
        summary = summaries.get(name)
        if summary is None:
            continue
        levels = {p.concurrency for p in spec.points if isinstance(p, ClosedLoop)}
        shapes[name] = WorkloadShape(
            input_len=max(1, round(float(summary["input_tokens"]["mean"]))),
            output_len=max(1, round(float(summary["output_tokens"]["mean"]))),
            concurrencies=tuple(sorted(levels)),
        )
    return shapes
