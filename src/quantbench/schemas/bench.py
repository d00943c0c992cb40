"""``reports/bench/<pair>/summary.json`` (stage ``bench@<pair>``): one variant on one engine.

Written by ``stages/bench.py`` from :func:`quantbench.bench.run.run_pair`: one :class:`BenchRow`
per (server setting, load point), the repeats folded by
:func:`quantbench.bench.results.fold_repeats` (means, t intervals, SLO verdict, cost), one
:class:`ServerPoint` per server start (its command, memory, exit, SLO-edge search), and the best
row under the SLO. Each repeat's own results are in the per-run ``summary.json`` beside the
records (:mod:`quantbench.schemas.session`).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version


class Interval(Strict):
    """A metric over n repeats: mean ± half_width is the confidence interval."""

    mean: float
    std: float = Field(description="Sample standard deviation (0 for one repeat).")
    n: int
    half_width: float = Field(description="Student-t half width (NaN for one repeat).")
    confidence: float


class BenchRow(Strict):
    """One (server point, load point) of one pair: repeats folded, SLO verdict, cost."""

    OMIT_WHEN_NONE = frozenset({"slo_passes"})

    server_point: str = Field(description="The server setting's label ('default' without sweep).")
    settings: dict[str, Any] = Field(description="The engine settings this server point changed.")
    command: list[str] = Field(description="The server's command line (secrets redacted).")
    env: dict[str, str] = Field(description="The server's extra environment (redacted).")
    load_point: str = Field(description="The load point's label (c4, r2, ...; 'search').")
    shape: dict[str, Any] | None = Field(description="The load point as configured.")
    output_throughput: float | None = Field(description="Output tokens per second.")
    request_throughput: float | None = Field(description="Completed requests per second.")
    goodput: float | None = Field(description="Requests per second meeting per-request SLOs.")
    error_rate: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    intervals: dict[str, Interval] = Field(description="Headline metric -> interval (repeats > 1).")
    repeats: int
    requests: int
    completed: int
    failed: int
    incomplete: int
    errors: dict[str, int] = Field(description="Error message -> count, over all repeats.")
    slo_passed: bool | None = Field(description="Every repeat met every SLO (None: no SLO).")
    slo_passes: str | None = Field(None, description="'k/n' repeats that met the SLO.")
    slo_reasons: list[str] = Field(description="Each constraint's verdict (the worst repeat).")
    cost_per_million_tokens: float | None = Field(description="At bench.price_per_hour.")
    error: str | None = Field(description="Why this point has no (complete) measurement.")

    @property
    def load_kind(self) -> str | None:
        kind = (self.shape or {}).get("kind")
        return str(kind) if kind in ("concurrency", "rate") else None

    @property
    def load_value(self) -> float | None:
        """Concurrency (closed loop) or arrival rate (open loop) of this point."""
        kind = self.load_kind
        value = (self.shape or {}).get(kind) if kind else None
        return float(value) if isinstance(value, int | float) else None

    @property
    def measured(self) -> bool:
        """Whether this point produced numbers (its server ran and requests completed)."""
        return not self.error and self.completed > 0

    def metric(self, name: str) -> float | None:
        """A numeric field by name, None where absent or not finite."""
        value = getattr(self, name, None)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if math.isfinite(value) else None


class ServerReport(Strict):
    """One server start as quantbench.engines.server.Server.report describes it."""

    engine: str
    argv: list[str] = Field(description="Redacted.")
    env: dict[str, str] = Field(description="Redacted.")
    url: str
    ready_seconds: float | None = Field(description="Start to ready (None: never ready).")
    peak_rss_bytes: int | None = Field(description="Peak resident set of the process tree.")
    peak_gpu_bytes: int | None
    memory_samples: int
    exit: str | None = Field(description="How the process ended, when it ended on its own.")
    log: str = Field(description="The server's log file.")


class TriedLoad(Strict):
    load: float
    passed: bool


class SearchInfo(Strict):
    """The SLO-edge search of one server point (bench.mode: search)."""

    kind: Literal["concurrency", "rate"]
    edge: float | None = Field(description="The highest load that met the SLO (None: none).")
    tried: list[TriedLoad]
    runs: int
    grid_size: int = Field(description="Runs a grid at the same resolution would take.")


class ServerPoint(Strict):
    server_point: str
    settings: dict[str, Any]
    command: list[str]
    env: dict[str, str]
    report: ServerReport
    error: str | None = Field(description="Why the server failed (None: it ran).")
    search: SearchInfo | None


class PairSummary(StageOutput):
    """One bench stage's result."""

    OUTPUT: ClassVar[str] = "reports/bench/{pair}/summary.json"
    STAGE: ClassVar[str] = "bench@{pair}"
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1)}

    schema_version: Literal[1] = version(1)
    pair: str
    variant: str
    format: str
    engine: str
    engine_version: str
    mode: Literal["grid", "search"]
    slo: str = Field(description="The SLO text the rows were judged by.")
    ranked_by: Literal["goodput", "output_throughput"]
    price_per_hour: float
    currency: str
    server_points: int
    rows: list[BenchRow]
    servers: list[ServerPoint]
    best: BenchRow | None = Field(description="The row to deploy (None: none met the SLO).")
    wall_seconds: float

    def server(self, label: str) -> ServerPoint | None:
        return next((s for s in self.servers if s.server_point == label), None)


__all__ = [
    "BenchRow",
    "Interval",
    "PairSummary",
    "SearchInfo",
    "ServerPoint",
    "ServerReport",
    "TriedLoad",
]
