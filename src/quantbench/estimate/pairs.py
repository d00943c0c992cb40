"""What each bench pair should measure: the estimate at every point the bench will run there.

The variant-level estimate answers "what can this variant do on this hardware"; a measured row
answers "what did this engine, with this setting, under this workload, deliver". To put the two
side by side like with like, the estimate stage also predicts, on this machine, every bench pair
(variant x engine) at every server setting of its sweep, for every closed-loop workload at that
workload's own mean lengths (as generated), at the concurrencies the bench measures and at 1-16
(where a search may go):

* the bytes as the engine holds them at that setting (``held_weights``: transformers holds AWQ
  as bf16; a server started in float32 holds a bf16 checkpoint as fp32);
* the engine's overhead and kernel efficiencies as calibrated;
* how many requests the engine runs at once with that setting (``Engine.max_batch``: llama.cpp's
  slots, vLLM's ``max_num_seqs``, one for ``transformers serve`` without continuous batching);
  more clients than that wait in its queue (``ServingModel``);
* the prompt as the server sees it: the chat template's tokens added to the workload's own
  (:mod:`quantbench.estimate.served`), and, where the engine keeps a prefix cache with that
  setting (``Engine.prefix_caching``), only the part it did not hold computed: the workload's
  reusable share and the template's shared head (as the probe saw it cached);
* the workload's think times between turns;
* where the pair's server was probed on this machine (by its bench stage), its
  measured request and step costs instead of the roofline's (``BenchPair.fit``).

The report matches each measured row by (pair, setting, workload, concurrency).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quantbench.engines.base import EngineSettings
from quantbench.engines.registry import get_engine
from quantbench.estimate.checkpoint import variant_weight_bytes
from quantbench.estimate.engines import canonical, held_weights
from quantbench.estimate.estimator import serving_model
from quantbench.estimate.serving import ServingModel
from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.hardware import HardwareSpec
from quantbench.schemas.roofline import ConcurrencyPoint, ModelShape, PairPrediction
from quantbench.schemas.step_fit import StepFit
from quantbench.schemas.workloads import WorkloadSummary
from quantbench.workloads.spec import ClosedLoop, WorkloadSpec

SEARCH_RANGE = range(1, 17)
"""Concurrencies predicted beside the measured ones: where an SLO-edge search may probe."""


@dataclass(frozen=True)
class BenchPair:
    """A bench pair as the estimate needs it: its variant, engine and engine settings (with the
    pair's own settings laid over the engine's section, its sweep included)."""

    variant: str
    engine: str
    settings: EngineSettings
    fit: StepFit | None = None
    """The pair's server probed on this machine (None: the roofline's costs)."""


@dataclass(frozen=True)
class WorkloadShape:
    """A closed-loop workload as generated: mean prompt and output tokens, measured loads.

    ``input_len`` is the prompt as served (``template_tokens`` of chat template included);
    ``reuse_share`` the share of the workload's own prompt tokens a prefix cache could serve;
    ``think_s`` the mean think time per request."""

    input_len: int
    output_len: int
    concurrencies: tuple[int, ...]
    template_tokens: float = 0.0
    reuse_share: float = 0.0
    think_s: float = 0.0
    prompts: tuple[tuple[float, float, float], ...] = ()
    """Per request, as served: (prompt tokens, of them a prefix an earlier request left in a
    cache, of them the part other conversations share too) (``served.prompt_profile``); empty:
    only the mean and the reusable share are known."""

    def computed_prompt(
        self,
        prefix_cache: bool,
        cached_template: float,
        block: int = 1,
        keeps_history: bool = True,
    ) -> float:
        """Mean prompt tokens a request's prefill computes: all of them without a prefix cache;
        with one, what it does not hold: of each request's shared prefix the whole ``block``s
        (a cache of blocks keeps no partial one), and at least the template's head every
        request shares (``cached_template``, as the probe saw it cached); at least one token.
        A cache that cannot keep every client's conversation (``keeps_history`` False: fewer
        llama.cpp slots than clients) holds only what conversations share with each other."""
        if not prefix_cache:
            return float(self.input_len)
        if self.prompts:
            computed = [
                max(
                    1.0,
                    served
                    - max(((own if keeps_history else common) // block) * block, cached_template),
                )
                for served, own, common in self.prompts
            ]
            return sum(computed) / len(computed)
        own = self.input_len - self.template_tokens
        template = max(self.template_tokens - cached_template, 0.0)
        return max(1.0, own * (1 - self.reuse_share) + template)


def _point(
    serving: ServingModel,
    shape: WorkloadShape,
    clients: int,
    prefix_cache: bool,
    cached_template: float,
    block: int,
    kept: int | None,
    slo: Any,
) -> ConcurrencyPoint:
    """The prediction with ``clients``: the prompt computed as the prefix cache leaves it with
    that many conversations (a cache that keeps ``kept`` of them keeps none's history beyond)."""
    keeps = kept is None or kept >= clients
    computed = shape.computed_prompt(prefix_cache, cached_template, block, keeps)
    return replace(serving, prefill_len=computed).point(clients, slo.ttft_ms, slo.itl_ms)


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
        served_by = get_engine(pair.engine)
        cached_template = pair.fit.cached_prompt_tokens if pair.fit is not None else 0.0
        block = pair.fit.cache_block if pair.fit is not None else 1
        for label, point_settings in pair.settings.sweep_points():
            # as this point's server holds them (its dtype: float32 where bf16 is emulated)
            held = held_weights(engine, arch, variant, stored[pair.variant], point_settings)
            max_batch = served_by.max_batch(point_settings)
            caches = served_by.prefix_caching(point_settings)
            kept = served_by.prefix_cache_conversations(point_settings)
            blocks = served_by.prefix_cache_block(point_settings) or block
            for workload, shape in workloads.items():
                serving = serving_model(
                    arch, held, hardware, settings, shape.input_len, shape.output_len,
                    engine, max_batch,
                )  # fmt: skip
                serving = replace(serving, fit=pair.fit, think_s=shape.think_s)

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
                        points=[
                            _point(serving, shape, c, caches, cached_template, blocks, kept, slo)
                            for c in levels
                        ],
                    )
                )
    return out


def bench_pairs(
    pairs: Mapping[str, Any],
    pair_settings: Callable[[str], EngineSettings],
    fits: Mapping[str, StepFit] | None = None,
) -> dict[str, BenchPair]:
    """``bench.pairs`` (validated ``Pair`` entries) with each pair's engine settings
    (``pair_settings``: the config's, its own laid over its engine's section), as the bench
    stages will run them; ``fits``: the pairs probed on this machine (their bench stages), by
    pair name."""
    fits = fits or {}
    return {
        name: BenchPair(pair.variant, pair.engine, pair_settings(name), fits.get(name))
        for name, pair in pairs.items()
    }


def workload_shapes(
    workloads: Mapping[str, WorkloadSpec],
    summaries: Mapping[str, WorkloadSummary | None],
    template_tokens: Mapping[str, float] | None = None,
    prompts: Mapping[str, Sequence[tuple[float, float, float]]] | None = None,
) -> dict[str, WorkloadShape]:
    """Each workload with a generated traffic summary: its mean lengths (the chat template's
    ``template_tokens`` added to the prompt's: given, or what the served ``prompts`` add to the
    summary's mean), its prefix-reuse share, its think time per request and the concurrencies
    of its closed-loop points (none for an open loop: its prediction still spans 1-16)."""
    shapes = {}
    template_tokens = template_tokens or {}
    prompts = prompts or {}
    for name, spec in workloads.items():
        summary = summaries.get(name)
        if summary is None:
            continue
        levels = {p.concurrency for p in spec.points if isinstance(p, ClosedLoop)}
        served = prompts.get(name, ())
        text_mean = summary.mean("input_tokens", 1.0)
        if name in template_tokens:
            template = float(template_tokens[name])
        elif served:
            template = sum(p[0] for p in served) / len(served) - text_mean
        else:
            template = 0.0
        think, requests = summary.think_s, summary.requests
        think_per_request = (
            think.mean * think.count / requests if think is not None and requests else 0.0
        )
        shapes[name] = WorkloadShape(
            input_len=max(1, round(text_mean + template)),
            output_len=max(1, round(summary.mean("output_tokens", 1.0))),
            concurrencies=tuple(sorted(levels)),
            template_tokens=template,
            reuse_share=summary.prefix_reuse_share,
            think_s=think_per_request,
            prompts=tuple(served),
        )
    return shapes
