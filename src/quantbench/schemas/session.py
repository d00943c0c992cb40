"""A load session's ``summary.json``: one workload against one server, a result per load point.

Written by :func:`quantbench.load.session.run_session` (``quantbench bench``, and each repeat of
each point of a bench stage, at ``reports/bench/<pair>/<server point>/<load point>/r<k>/``), beside
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
from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version


def pct_key(p: float) -> str:
    """'p50', 'p99', 'p99.9': how a percentile is named in results."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p:g}"


class LatencyStats(Strict):
    """Distribution of one latency, in milliseconds."""

    count: int
    mean_ms: float
    median_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    percentiles_ms: dict[str, float] = Field(description="'p50' -> value, for each percentile.")

    @classmethod
    def of(cls, seconds: Sequence[float], percentiles: Sequence[float]) -> LatencyStats | None:
        if not seconds:
            return None
        ms = np.asarray(seconds, dtype=float) * 1000.0
        return cls(
            count=len(ms),
            mean_ms=float(ms.mean()),
            median_ms=float(np.median(ms)),
            std_ms=float(ms.std()),
            min_ms=float(ms.min()),
            max_ms=float(ms.max()),
            percentiles_ms={pct_key(p): float(np.percentile(ms, p)) for p in percentiles},
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


class PointResult(Strict):
    """Results of one load point: the typed result schema of the harness."""

    point: str
    scenario: str
    shape: dict[str, Any] = Field(description="The load point as configured.")
    started_at: float = Field(description="Epoch seconds of the first measured send.")
    duration_s: float
    requests: int = Field(description="Measured requests (warm-up excluded).")
    completed: int
    failed: int
    incomplete: int
    warmup_excluded: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float = Field(description="Completed requests per second.")
    output_throughput: float = Field(description="Output tokens per second.")
    total_token_throughput: float = Field(description="Prompt + output tokens per second.")
    goodput: float | None = Field(
        description="Requests per second meeting all per-request SLOs; None without SLOs."
    )
    error_rate: float
    max_concurrent_requests: int
    max_output_tokens_per_s: float = Field(description="Most output tokens in any 1 s bucket.")
    ttft: LatencyStats | None
    tpot: LatencyStats | None
    itl: LatencyStats | None
    e2e: LatencyStats | None
    arrival_lag: LatencyStats | None = Field(
        description="Open loop: send time - scheduled arrival time."
    )
    token_sources: dict[str, int] = Field(description="Where output token counts came from.")
    errors: dict[str, int] = Field(description="Most frequent error messages and their counts.")
    slo: list[slo_mod.ConstraintResult] = Field(default_factory=list)
    slo_passed: bool | None = None

    def metric_value(self, metric: str, statistic: str | None) -> float | None:
        """Lookup for :func:`quantbench.slo.evaluate`."""
        if metric in slo_mod.LATENCY_METRICS:
            stats: LatencyStats | None = getattr(self, metric)
            return None if stats is None else stats.stat(statistic)
        return {
            "rps": self.request_throughput,
            "output_tps": self.output_throughput,
            "total_tps": self.total_token_throughput,
            "goodput": self.goodput,
            "error_rate": self.error_rate,
        }[metric]


class SessionSummary(StageOutput):
    """One load session: the server, the workload as validated, a result per point."""

    OUTPUT: ClassVar[str] = (
        "reports/bench/{pair}/{server_point}/{load_point}/r{repeat}/summary.json"
    )
    STAGE: ClassVar[str] = "bench@{pair}"
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1)}

    schema_version: Literal[1] = version(1)
    url: str
    engine: str
    model: str
    workload: dict[str, Any] = Field(description="The workload spec as validated (load.spec).")
    slo: str | None
    created_at: float = Field(description="Epoch seconds when the session ended.")
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


__all__ = ["LatencyStats", "PointResult", "SessionSummary", "pct_key"]
