"""A load session's ``summary.json``: one workload against one server, a result per load point.

Written by :func:`quantbench.load.session.run_session` (``quantbench load``, and each repeat of
each point of a bench stage, at ``reports/bench/<pair>/<server point>/<workload>/<load point>/r<k>/``), beside
that run's ``records.jsonl``. A :class:`PointResult` is computed from the raw request records by
:func:`quantbench.load.metrics.summarize` (see there for every definition); the bench stage folds
the repeats' results into its rows (:mod:`quantbench.schemas.bench`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from quantbench import slo as slo_mod

# Every interval's one form, and one-sided bounds (defined beside the code that computes them).
from quantbench.precision import (
    Bounds,
    Figure,
    percentile_of_sorted,
    proportion_bounds,
    quantile_bounds,
    quantile_interval,
)
from quantbench.schemas.base import VERSION_KEY, Migrations, StageOutput, Strict, stamp, version
from quantbench.schemas.workloads import WorkloadSummary


def pct_key(p: float) -> str:
    """'p50', 'p99', 'p99.9': how a percentile is named in results."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p:g}"


class LatencyStats(Strict):
    """Distribution of one latency over the measured requests, in milliseconds, each percentile
    with its distribution-free interval where the sample allows one (widened by batch means
    where the values were correlated in time), and with the one-sided bounds an SLO verdict is
    decided on."""

    count: int
    mean_ms: float
    median_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    percentiles_ms: dict[str, float] = Field(description="'p50' -> value, for each percentile.")
    intervals_ms: dict[str, Figure] = Field(
        default_factory=dict, description="'p50' -> the percentile with its interval."
    )
    bounds_ms: dict[str, Bounds] = Field(
        default_factory=dict,
        description="'p50' -> the percentile's one-sided lower and upper bounds at the "
        "interval's confidence (order statistics, exact binomial): what an SLO verdict is "
        "decided on (a version-3 file has none).",
    )
    too_few: list[str] = Field(
        default_factory=list,
        description="Percentiles the sample is too small to bound ('too few requests for p99').",
    )

    @classmethod
    def of(
        cls,
        seconds: Sequence[float],
        percentiles: Sequence[float],
        confidence: float = 0.95,
        times: Sequence[float] | None = None,
    ) -> LatencyStats | None:
        """The statistics of ``seconds``; ``times`` (one per value: when it was taken, or any
        number that orders them in time) let the intervals account for values that move
        together in time (:func:`quantbench.precision.quantile_interval`)."""
        if not seconds:
            return None
        raw = np.asarray(seconds, dtype=float) * 1000.0
        ms = np.sort(raw)
        finite = ms[np.isfinite(ms)]
        intervals: dict[str, Figure] = {}
        bounds: dict[str, Bounds] = {}
        too_few: list[str] = []
        for p in percentiles:
            interval = quantile_interval(raw, p, confidence, times)
            if interval is None:
                too_few.append(pct_key(p))
            else:
                intervals[pct_key(p)] = interval
            one_sided = quantile_bounds(ms, p, confidence)
            if one_sided is not None:
                bounds[pct_key(p)] = one_sided
        return cls(
            count=len(ms),
            mean_ms=float(finite.mean()) if finite.size else float("inf"),
            median_ms=percentile_of_sorted(ms, 50.0),
            std_ms=float(finite.std()) if finite.size else 0.0,
            min_ms=float(ms.min()),
            max_ms=float(ms.max()),
            percentiles_ms={pct_key(p): percentile_of_sorted(ms, p) for p in percentiles},
            intervals_ms=intervals,
            bounds_ms=bounds,
            too_few=too_few,
        )

    def stat(self, statistic: str | None) -> float | None:
        """Value of 'mean', 'median', 'max', 'min' or 'pNN'; None: per request, i.e. max."""
        if statistic in (None, "max"):
            return self.max_ms
        if statistic == "mean":
            return self.mean_ms
        if statistic == "median":
            return self.median_ms
        if statistic == "min":
            return self.min_ms
        assert statistic is not None
        return self.percentiles_ms.get(statistic)


class Window(Strict):
    """The measured window: from the first measured request's start to the end of the last
    measured request, on the monotonic clock (seconds; zero is arbitrary)."""

    start: float
    end: float
    duration_s: float
    started_at_wall: float = Field(description="The window's start in epoch seconds (a label).")


class LoadAchieved(Strict):
    """The load the point claimed against the load it ran, over the measured window."""

    kind: Literal["concurrency", "rate"]
    offered: float = Field(description="Streams (closed loop) or arrivals per second (open loop).")
    mean_in_flight: float = Field(description="Requests in flight, averaged over the window.")
    peak_in_flight: int
    mean_streams_busy: float | None = Field(
        description="Closed loop: conversations in progress (a stream thinking between turns is "
        "busy), averaged over the window."
    )
    achieved_rate: float | None = Field(
        description="Open loop: measured conversations started per second."
    )
    arrival_lag: LatencyStats | None = Field(
        description="Open loop: start - scheduled arrival, measured conversations."
    )
    reached: bool = Field(
        description="Closed: every stream busy for 95 % of the window; open: the achieved rate "
        "within 5 % of the offered one and the p95 lag under a tenth of a gap."
    )
    note: str = ""


class LengthCheck(Strict):
    """Delivered output lengths against the requested ones (fixed output length)."""

    requested_tokens: int
    delivered_tokens: int
    mismatched: int = Field(description="Completed measured requests whose length differs.")
    checked: bool = Field(description="Whether the workload asked for fixed lengths.")
    ok: bool


class HarnessCheck(Strict):
    """How far behind the load generator itself ran: a busy client shows here, not in the
    server's figures."""

    loop_lag_p99_ms: float | None = Field(description="How late its event loop woke, p99.")
    client_cpu_share: float | None = Field(description="CPU time over wall time of the client.")
    client_bound: bool
    note: str = ""


class CacheUse(Strict):
    """Prompt tokens a prefix cache could serve (from the prompts) and did (the engine says)."""

    prompt_tokens: int
    cached_tokens: int | None = Field(description="What the engine reports (None: it does not).")
    served_share: float | None


class Speculation(Strict):
    """Speculative decoding over the completed measured requests: draft tokens proposed and
    accepted, as the engine reports them per request."""

    requests: int = Field(description="Requests whose engine reported draft statistics.")
    drafted: int
    accepted: int
    acceptance_rate: float | None = Field(description="accepted / drafted (None: none drafted).")


class GpuDeviceWindow(Strict):
    """One GPU's counters over a point's measured window (quantbench.load.gpu_window): each
    figure over the samples that reported it (None: it never did)."""

    index: int = Field(description="The GPU's index, as the driver numbers it.")
    samples: int = Field(description="Samples of this GPU inside the window.")
    utilization_mean_pct: float | None = Field(
        description="Share of the time a kernel ran (%), mean over the samples."
    )
    utilization_max_pct: float | None
    memory_used_max_mib: float | None = Field(
        description="Device memory in use (MiB, every process), the most any sample saw."
    )
    power_mean_w: float | None = Field(description="Board power draw (W), mean over the samples.")
    power_max_w: float | None
    sm_clock_mean_mhz: float | None = Field(description="SM clock (MHz), mean over the samples.")


class GpuWindow(Strict):
    """Every GPU's counters, sampled every ``interval_s`` through the point's measured window
    (warm-up excluded); absent on a machine without a GPU."""

    interval_s: float = Field(description="Seconds between two samples.")
    samples: int = Field(description="Sampling instants inside the window.")
    devices: list[GpuDeviceWindow]


class PointResult(Strict):
    """Results of one load point: the typed result schema of the harness (quantbench.load.metrics
    defines every figure)."""

    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"gpu"})

    point: str
    scenario: str
    shape: dict[str, Any] = Field(description="The load point as configured.")
    started_at: float = Field(description="Epoch seconds of the window's start (a label).")
    window: Window
    duration_s: float
    stop_reason: str = Field(description="Why measuring stopped (count, precision, deadline).")
    requests: int = Field(description="Measured requests (warm-up and cool-down excluded).")
    completed: int
    failed: int
    incomplete: int = Field(description="Measured requests still streaming at the point's stop.")
    unsent: int = Field(description="Measured requests that arrived but were never sent.")
    not_served: int = Field(description="incomplete + unsent: arrived, never answered.")
    warmup_excluded: int
    cooldown_excluded: int
    total_input_tokens: int
    total_output_tokens: int
    window_output_tokens: int = Field(
        description="Tokens of every request (all phases) that arrived inside the window."
    )
    request_throughput: float = Field(description="Completed measured requests per second.")
    request_throughput_interval: Figure | None = Field(
        default=None, description="Batch means over the window, by when requests ended."
    )
    output_throughput: float = Field(description="Window output tokens per second.")
    output_throughput_interval: Figure | None = Field(description="Batch means over the window.")
    total_token_throughput: float = Field(description="Prompt + output tokens per second.")
    goodput: float | None = Field(
        description="Measured requests per second meeting all per-request SLOs; None without."
    )
    goodput_interval: Figure | None = Field(
        default=None, description="Batch means over the window, by when good requests ended."
    )
    good_output_throughput: float | None = Field(
        description="Output tokens per second of requests meeting all per-request SLOs: the "
        "window's token rate times the share of measured tokens that were good."
    )
    good_output_throughput_interval: Figure | None = None
    error_rate: float = Field(description="(failed + not served) / measured requests.")
    error_rate_interval: Figure | None = None
    max_concurrent_requests: int
    max_output_tokens_per_s: float = Field(description="Most output tokens in any 1 s bucket.")
    ttft: LatencyStats | None
    tpot: LatencyStats | None
    itl: LatencyStats | None
    e2e: LatencyStats | None
    arrival_lag: LatencyStats | None = Field(
        description="Open loop: send time - scheduled arrival time."
    )
    load: LoadAchieved
    lengths: LengthCheck
    harness: HarnessCheck
    cache: CacheUse
    speculation: Speculation | None = Field(
        None, description="Speculative decoding's acceptance (None: the engine reported none)."
    )
    token_sources: dict[str, int] = Field(description="Where output token counts came from.")
    errors: dict[str, int] = Field(description="Most frequent error messages and their counts.")
    slo: list[slo_mod.ConstraintResult] = Field(default_factory=list)
    slo_passed: bool | None = None
    slo_verdict: Literal["pass", "fail", "undecided"] | None = None
    gpu: GpuWindow | None = Field(
        None,
        description="The GPUs' counters over the window (None, and left out of the file: no "
        "GPU, or no sample inside the window).",
    )

    def metric_value(
        self,
        metric: str,
        statistic: str | None,
        slo_stats: dict[str, LatencyStats] | None = None,
    ) -> float | slo_mod.Measured | None:
        """Lookup for :func:`quantbench.slo.evaluate`: the value, with its interval and the
        one-sided bounds its verdict is decided on where there are.

        ``slo_stats`` replace a latency's statistics for the SLO check: there every measured
        request counts, an unanswered one as infinitely late (a request that never got its first
        token did not meet a TTFT limit)."""
        if metric in slo_mod.LATENCY_METRICS:
            stats: LatencyStats | None = (slo_stats or {}).get(metric) or getattr(self, metric)
            if stats is None:
                return None
            bounds = stats.bounds_ms.get(statistic or "")
            if statistic is not None and statistic in stats.too_few:
                return slo_mod.Measured(
                    value=stats.stat(statistic),
                    why=f"too few requests for {statistic} ({stats.count})",
                    bounds=bounds,
                )
            figure = stats.intervals_ms.get(statistic or "")
            if figure is not None:
                return slo_mod.Measured(
                    value=stats.stat(statistic), low=figure.low, high=figure.high, bounds=bounds
                )
            return stats.stat(statistic)
        if metric == "error_rate" and self.error_rate_interval is not None:
            f = self.error_rate_interval
            errors = round(self.error_rate * f.n)
            return slo_mod.Measured(
                value=self.error_rate, low=f.low, high=f.high,
                bounds=proportion_bounds(errors, f.n, f.confidence),
            )  # fmt: skip
        if metric == "output_tps" and self.output_throughput_interval is not None:
            f = self.output_throughput_interval
            return slo_mod.Measured(value=self.output_throughput, low=f.low, high=f.high)
        return {
            "rps": self.request_throughput,
            "output_tps": self.output_throughput,
            "total_tps": self.total_token_throughput,
            "goodput": self.goodput,
            "error_rate": self.error_rate,
        }[metric]


def _workload_summary_v1(data: dict[str, Any]) -> None:
    copied = data.get("workload_summary")
    if not copied:
        data["workload_summary"] = None
    elif isinstance(copied, dict) and VERSION_KEY not in copied:
        data["workload_summary"] = WorkloadSummary.MIGRATIONS[0](copied)


class SessionSummary(StageOutput):
    """One load session: the server, the workload as validated, a result per point."""

    OUTPUT: ClassVar[str] = (
        "reports/bench/{pair}/{server_point}/{workload}/{load_point}/r{repeat}/summary.json"
    )
    STAGE: ClassVar[str] = "bench@{pair}"
    # version 2: measured window with cool-down, not-served counts, intervals, achieved load,
    # length, harness and cache checks (docs/LOAD.md); version 1 results cannot be recomputed
    # version 3: speculative decoding's acceptance per point (a version-2 file has none)
    # version 4: one-sided bounds per percentile (LatencyStats.bounds_ms) and each SLO verdict's
    # bounds, sample and power (ConstraintResult); a version-3 file reads with none of them (its
    # verdicts were decided on two-sided intervals, as it says)
    # version 5: the workload's summary is the workloads stage's own schema (a version-4 copy
    # was its raw JSON, "version": 1 inside, or {} where there was none)
    # version 6: the GPUs' counters over each point's window (PointResult.gpu; a version-5
    # file, and any file written without a GPU, has none)
    MIGRATIONS: ClassVar[Migrations] = {
        2: stamp(3),
        3: stamp(4),
        4: stamp(5, nested=_workload_summary_v1),
        5: stamp(6),
    }

    schema_version: Literal[6] = version(6)
    url: str
    engine: str
    model: str
    workload: dict[str, Any] = Field(description="The workload spec as validated (workloads.spec).")
    slo: str | None
    created_at: float = Field(description="Epoch seconds when the session ended.")
    workload_summary: WorkloadSummary | None = Field(
        None, description="What the traffic is made of (the workloads stage's summary)."
    )
    points: list[PointResult]

    @property
    def percentiles(self) -> list[float] | None:
        """The percentiles the workload asked for, if it names them."""
        pcts = self.workload.get("percentiles")
        return [float(p) for p in pcts] if isinstance(pcts, list) and pcts else None

    @property
    def scenario(self) -> str | None:
        name = self.workload.get("name")
        return str(name) if name is not None else None


__all__ = [
    "CacheUse",
    "Figure",
    "GpuDeviceWindow",
    "GpuWindow",
    "HarnessCheck",
    "LatencyStats",
    "LengthCheck",
    "LoadAchieved",
    "PointResult",
    "SessionSummary",
    "Speculation",
    "Window",
    "pct_key",
]
