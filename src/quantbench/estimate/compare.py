"""Put estimates beside measurements, and fit the efficiencies that explain them.

A measurement is a :class:`MeasuredPoint` (one variant, engine, server setting and load
point); the benchmark stage adapts its summaries to it. For each point the estimate is
recomputed at the point's own concurrency and lengths, and ratios are reported in the
direction "how optimistic was the estimate": measured / estimated for latencies, estimated /
measured for throughput, so a ratio above 1 always means reality was slower.

The fit inverts the roofline. Decode steps that the estimate finds memory-bound satisfy
``TPOT = overhead + bytes_per_step / bandwidth``; with two or more concurrencies a least-
squares line gives both the effective bandwidth and a per-step overhead, with one it gives
the bandwidth alone. A compute-bound prompt at concurrency 1 gives the effective FLOP/s
(``TTFT = FLOPs / rate``). The fitted figures can be fed back as efficiency overrides.

A pair's prediction is calibrated by a probe of its own server (by its bench stage: one setting,
1 to a few requests at once, short prompts, a fixed output), so a measured figure inside what the
probe ran tests little more than the fit reproducing its own data on the same server. :class:`ProbeSpan`
is what the probe ran, and :meth:`ProbeSpan.judge` says whether a measured figure lies inside it
(in-sample) or beyond it (out-of-sample: more streams, another setting, other lengths), and why:
only the second kind tests the model as a prediction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from quantbench.estimate.serving import ServingModel
from quantbench.schemas.roofline import ComparisonRow, FittedEfficiency
from quantbench.schemas.step_fit import ProbeRequest, StepFit

# A comparison point is "within 2x" when every available ratio lies in [1/2, 2].
AGREEMENT_FACTOR = 2.0


class MeasuredPoint(BaseModel):
    """One measured load point, as the benchmark stage summarises it."""

    model_config = ConfigDict(extra="forbid")

    variant: str
    engine: str
    concurrency: int = Field(ge=1)
    ttft_ms: float | None = Field(default=None, gt=0, description="median time to first token")
    tpot_ms: float | None = Field(default=None, gt=0, description="median time per output token")
    output_tps: float | None = Field(default=None, gt=0, description="output tokens/s, all clients")
    input_len: int | None = Field(default=None, ge=1, description="prompt tokens, if not default")
    output_len: int | None = Field(default=None, ge=1, description="output tokens, if not default")
    hardware: str = Field(default="this", description="the hardware name the estimate uses")
    setting: str | None = Field(default=None, description="server-setting label")
    max_batch: int | None = Field(
        default=None, ge=1, description="requests the engine runs at once with that setting"
    )
    proxy: bool = Field(
        default=False, description="a stand-in measurement (e.g. a plain generate loop)"
    )

    @model_validator(mode="after")
    def _has_a_figure(self) -> MeasuredPoint:
        if self.ttft_ms is None and self.tpot_ms is None and self.output_tps is None:
            raise ValueError(
                f"measured point {self.variant}/{self.engine}@{self.concurrency} has none of "
                "ttft_ms, tpot_ms, output_tps"
            )
        return self


# Builds the serving model a measured point is compared with (its lengths, its engine).
ServingFor = Callable[[MeasuredPoint], ServingModel]


@dataclass(frozen=True)
class SampleCheck:
    """Whether a measured figure lies inside what the pair's probe ran, and why."""

    in_sample: bool
    reason: str

    @property
    def label(self) -> str:
        return "in-sample" if self.in_sample else "out-of-sample"


@dataclass(frozen=True)
class ProbeSpan:
    """What a pair's probe ran (its bench stage's ``probe.json``): one setting, 1 to ``max_batch`` requests at
    once, prompts of ``prompt_tokens`` (the server's count, chat template included) and decode
    steps up to ``max_context`` positions.

    The calibration records no lengths as such; its requests carry them. Output length has no
    range of its own (the probe asks for a fixed count): what it changes in the fit is how far
    the decode steps' context reaches, so it is bounded through ``max_context``."""

    server_point: str
    max_batch: int
    prompt_tokens: tuple[int, int]
    max_context: int

    @classmethod
    def from_probe(
        cls, server_point: str, requests: Sequence[ProbeRequest], fit: StepFit | None
    ) -> ProbeSpan | None:
        """The span of a probe that was fitted (None: it failed, so nothing was fitted to it)."""
        if fit is None or not requests:
            return None
        prompts = [r.prompt_tokens for r in requests]
        return cls(
            server_point=server_point,
            max_batch=fit.batch_measured,
            prompt_tokens=(min(prompts), max(prompts)),
            max_context=max(r.prompt_tokens + r.output_tokens for r in requests),
        )

    def judge(
        self,
        server_point: str,
        concurrency: int,
        prompt_tokens: float | None,
        output_tokens: float | None,
    ) -> SampleCheck:
        """In-sample when the figure was measured at the probe's setting, at 1 to its largest
        batch, with a (mean) prompt within its prompts and a context within its reach; every
        way it lies outside is named."""
        outside = self._load_beyond(server_point, concurrency)
        if prompt_tokens is None or output_tokens is None:
            # a figure whose lengths are unknown cannot be shown to repeat the probe
            return SampleCheck(False, "; ".join([*outside, "lengths unknown"]))
        context = prompt_tokens + output_tokens
        outside += self._lengths_beyond(prompt_tokens, context)
        if outside:
            return SampleCheck(False, "; ".join(outside))
        low, high = self.prompt_tokens
        return SampleCheck(
            True,
            f"the probe's setting, c{concurrency} within its 1-{self.max_batch} streams, prompt "
            f"{prompt_tokens:.0f} tokens within its {low}-{high}, context {context:.0f} "
            f"within its {self.max_context}",
        )

    def _load_beyond(self, server_point: str, concurrency: int) -> list[str]:
        out = []
        if server_point != self.server_point:
            out.append(f"setting {server_point}, the probe ran {self.server_point}")
        if concurrency > self.max_batch:
            out.append(f"{concurrency} streams, beyond the probe's {self.max_batch}")
        return out

    def _lengths_beyond(self, prompt_tokens: float, context: float) -> list[str]:
        low, high = self.prompt_tokens
        out = []
        if not low <= prompt_tokens <= high:
            out.append(f"prompt {prompt_tokens:.0f} tokens, outside the probe's {low}-{high}")
        if context > self.max_context:
            out.append(f"context {context:.0f} tokens, beyond the probe's {self.max_context}")
        return out


def load_measured(path: Path) -> list[MeasuredPoint]:
    """Read measured points from JSON: a list, or an object with a ``points`` list."""
    data = json.loads(Path(path).read_text())
    items = data["points"] if isinstance(data, dict) else data
    return [MeasuredPoint.model_validate(item) for item in items]


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def compare_points(
    serving_for: ServingFor, points: Sequence[MeasuredPoint], ttft_slo_ms: float, itl_slo_ms: float
) -> list[ComparisonRow]:
    """One row per measured point, the estimate recomputed at that point."""
    rows = []
    for point in points:
        estimate = serving_for(point).point(point.concurrency, ttft_slo_ms, itl_slo_ms)
        ratios = [
            _ratio(point.ttft_ms, estimate.ttft_ms),
            _ratio(point.tpot_ms, estimate.itl_ms),
            _ratio(estimate.output_tps, point.output_tps),
        ]
        present = [r for r in ratios if r is not None]
        rows.append(
            ComparisonRow(
                variant=point.variant,
                engine=point.engine,
                hardware=point.hardware,
                setting=point.setting,
                concurrency=point.concurrency,
                proxy=point.proxy,
                estimated_ttft_ms=estimate.ttft_ms,
                measured_ttft_ms=point.ttft_ms,
                ttft_ratio=ratios[0],
                estimated_tpot_ms=estimate.itl_ms,
                measured_tpot_ms=point.tpot_ms,
                tpot_ratio=ratios[1],
                estimated_output_tps=estimate.output_tps,
                measured_output_tps=point.output_tps,
                output_tps_ratio=ratios[2],
                within_2x=all(1 / AGREEMENT_FACTOR <= r <= AGREEMENT_FACTOR for r in present),
            )
        )
    return rows


def _fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(intercept >= 0, slope > 0) of y = a + b x; through the origin when a line cannot."""
    if len(set(x.tolist())) >= 2:
        slope, intercept = np.polyfit(x, y, 1)
        if slope > 0 and intercept >= 0:
            return float(intercept), float(slope)
    return 0.0, float(np.dot(x, y) / np.dot(x, x))


def fit_efficiency(
    serving_for: ServingFor, points: Sequence[MeasuredPoint]
) -> FittedEfficiency | None:
    """Fit effective bandwidth, per-step overhead and compute rate for one variant/engine."""
    if not points:
        return None
    first = points[0]
    step_bytes, tpots, prompt_flops, ttfts = [], [], [], []
    rates = serving_for(first).rates
    for point in points:
        serving = serving_for(point)
        if point.tpot_ms is not None and serving.output_len > 1:
            steps = serving.decode_steps(point.concurrency)
            flops, nbytes = float(np.mean(steps.flops)), float(np.mean(steps.bytes))
            if flops / rates.flops < nbytes / rates.bandwidth:  # memory-bound: fits bandwidth
                step_bytes.append(nbytes)
                tpots.append(point.tpot_ms / 1e3)
        if point.ttft_ms is not None and point.concurrency == 1:
            prompt = serving.prompt_alone()
            if bool(prompt.compute_bound(rates)):
                prompt_flops.append(float(prompt.flops))
                ttfts.append(point.ttft_ms / 1e3)

    bandwidth = efficiency_bw = overhead_ms = None
    parts = []
    if step_bytes:
        overhead, inverse_bandwidth = _fit_line(np.array(step_bytes), np.array(tpots))
        bandwidth = 1 / inverse_bandwidth / 1e9
        efficiency_bw = bandwidth * 1e9 / rates.peak_bandwidth
        overhead_ms = overhead * 1e3
        separable = len(set(step_bytes)) >= 2
        parts.append(
            f"decode: {bandwidth:.1f} GB/s effective ({efficiency_bw:.0%} of "
            f"{rates.peak_bandwidth / 1e9:.1f} GB/s) plus {overhead_ms:.2f} ms per step"
            + ("" if separable else " (one concurrency: overhead not separable, all in bandwidth)")
        )
    tflops = efficiency_c = None
    if prompt_flops:
        tflops = float(np.sum(prompt_flops) / np.sum(ttfts)) / 1e12
        efficiency_c = tflops * 1e12 / rates.peak_flops
        parts.append(
            f"prefill: {tflops:.3f} TFLOP/s effective ({efficiency_c:.0%} of "
            f"{rates.peak_flops / 1e12:.3f})"
        )
    if not parts:
        parts.append("no memory-bound decode or compute-bound prefill points to fit")
    return FittedEfficiency(
        variant=first.variant,
        engine=first.engine,
        hardware=first.hardware,
        decode_points=len(step_bytes),
        effective_bandwidth_gbs=bandwidth,
        bandwidth_efficiency=efficiency_bw,
        step_overhead_ms=overhead_ms,
        prefill_points=len(prompt_flops),
        effective_tflops=tflops,
        compute_efficiency=efficiency_c,
        explanation="; ".join(parts),
    )


def group_points(
    points: Sequence[MeasuredPoint],
) -> dict[tuple[str, str, str], list[MeasuredPoint]]:
    """Points grouped by (variant, engine, hardware), the unit a fit describes."""
    groups: dict[tuple[str, str, str], list[MeasuredPoint]] = {}
    for point in points:
        groups.setdefault((point.variant, point.engine, point.hardware), []).append(point)
    return groups
