"""``reports/bench/<pair>/summary.json`` (stage ``bench@<pair>``): one variant on one engine.

Written by ``stages/bench.py`` from :func:`quantbench.bench.run.run_pair`: one :class:`BenchRow`
per (server setting, load point), the repeats folded by
:func:`quantbench.decision.rows.fold_repeats` (means, t intervals, SLO verdict, cost), one
:class:`ServerPoint` per server start (its command, memory, exit, SLO-edge search), and the best
row under the SLO. Each repeat's own results are in the per-run ``summary.json`` beside the
records (:mod:`quantbench.schemas.session`).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas import metrics
from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version
from quantbench.schemas.common import HeldoutAnswer
from quantbench.schemas.session import Figure, GpuWindow

# A figure with its interval: over repeats (Student t), or within one run (order statistics for
# percentiles, batch means for rates, Clopper-Pearson for the error rate).
Interval = Figure


class LoadSummary(Strict):
    """Offered against achieved load, over the repeats (the worst repeat's flags)."""

    offered: float | None
    mean_in_flight: float | None
    peak_in_flight: int | None
    achieved_rate: float | None
    arrival_lag_p95_ms: float | None
    reached: bool
    note: str = ""


class CacheSummary(Strict):
    possible_share: float | None = Field(
        description="Prompt tokens a prefix cache could serve, computed from the prompts."
    )
    served_share: float | None = Field(description="What the engine says it served from cache.")
    reset: str | None = Field(
        default=None,
        description="What was done to the engine's prefix cache before the point's runs: 'reset', "
        "'none' (the engine keeps no cache across requests), 'not supported', or why it failed.",
    )


class BenchRow(Strict):
    """One (server point, workload, load point) of one pair: repeats folded, SLO verdict, cost,
    and every check that decides whether the row may be ranked."""

    OMIT_WHEN_NONE = frozenset({"slo_passes", "gpu"})

    workload: str = Field(description="The workload (its traffic and SLO profile) of this row.")
    server_point: str = Field(description="The server setting's label ('default' without sweep).")
    settings: dict[str, Any] = Field(description="The engine settings this server point changed.")
    command: list[str] = Field(description="The server's command line (secrets redacted).")
    env: dict[str, str] = Field(description="The server's extra environment (redacted).")
    load_point: str = Field(description="The load point's label (c4, r2, ...; 'search').")
    shape: dict[str, Any] | None = Field(description="The load point as configured.")
    output_throughput: float | None = Field(description="Window output tokens per second.")
    good_output_throughput: float | None = Field(
        description="Output tokens per second of requests meeting every per-request SLO: what "
        "the best configuration is chosen by."
    )
    request_throughput: float | None = Field(description="Completed requests per second.")
    goodput: float | None = Field(description="Requests per second meeting per-request SLOs.")
    error_rate: float | None = Field(description="(failed + not served) / measured requests.")
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    tpot_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    intervals: dict[str, Interval] = Field(
        description="Headline figure -> its interval (over repeats when there are several)."
    )
    too_few: list[str] = Field(
        default_factory=list,
        description="Headline percentiles the sample is too small for ('too few requests').",
    )
    repeats: int
    requests: int
    completed: int
    failed: int
    incomplete: int
    unsent: int = 0
    not_served: int = 0
    errors: dict[str, int] = Field(description="Error message -> count, over all repeats.")
    slo_verdict: Literal["pass", "fail", "undecided"] | None = Field(
        None, description="The worst repeat's verdict (None: no SLO)."
    )
    slo_passed: bool | None = Field(description="Every repeat's verdict is pass (None: no SLO).")
    slo_passes: str | None = Field(None, description="'k/n' repeats that met the SLO.")
    slo_reasons: list[str] = Field(description="Each constraint's verdict (the worst repeat).")
    load: LoadSummary | None = None
    lengths_ok: bool = True
    length_note: str = ""
    harness_ok: bool = True
    harness_note: str = ""
    cache: CacheSummary | None = None
    draft_acceptance: float | None = Field(
        None,
        description="Speculative decoding: draft tokens accepted over proposed, over the row's "
        "repeats (None: no speculation reported).",
    )
    stop_reason: str = ""
    gpu: GpuWindow | None = Field(
        None,
        description="The GPUs' utilization, memory used, power and SM clock over the point's "
        "measured windows, its repeats folded (quantbench.load.gpu_window.fold_windows); None, "
        "and left out of the file, where no GPU was sampled.",
    )
    cost_per_million_tokens: float | None = Field(description="At bench.price_per_hour.")
    rankable: bool = Field(
        False,
        description="Whether this row may be recommended: it met the SLO (decided), ran the load "
        "it claims, delivered the lengths asked for, the client kept up, and the server serves "
        "what was evaluated.",
    )
    flags: list[str] = Field(default_factory=list, description="Why it may not be ranked.")
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

    @property
    def key(self) -> str:
        return f"{self.server_point}/{self.workload}/{self.load_point}"

    def metric(self, name: str) -> float | None:
        """A numeric field by name, None where absent or not finite."""
        value = getattr(self, name, None)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if math.isfinite(value) else None


HEADLINE_FIGURES = tuple(name for name in BenchRow.model_fields if name in metrics.HEADLINE)
"""A row's figures with intervals (quantbench.schemas.metrics' headline figures), in the order
the row declares them."""


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

    @property
    def memory_bytes(self) -> int | None:
        """The server's memory: its GPU memory (per process) plus its host memory (None: neither
        was sampled); on a CPU machine its resident set alone."""
        if self.peak_rss_bytes is None and self.peak_gpu_bytes is None:
            return None
        return (self.peak_rss_bytes or 0) + (self.peak_gpu_bytes or 0)


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
    fitted: dict[str, float] = Field(
        default_factory=dict,
        description="Load -> pass rate of the isotonic fit over every run (non-increasing).",
    )
    interval: list[float] | None = Field(
        None,
        description="[low, high]: bootstrap interval of the edge over the runs, ends at loads "
        "that were run (None: no load passed).",
    )
    confidence: float = Field(0.95, description="Of the interval.")
    dropped: str | None = Field(
        None,
        description="Why the search stopped early: the setting could not reach the leader "
        "(bench.race).",
    )


class RaceDrop(Strict):
    """Grid mode (bench.race): load points of one workload this server setting did not run, or
    stopped part-way, because what it measured there bounds what it could deliver below the
    leader's interval."""

    reason: str
    leader: str = Field(description="The leading row, '<server point> @ <load point>'.")
    metric: str = Field(description="The ranked figure the bound is on.")
    floor: float = Field(
        description="What the bound had to fall below: the low end of the leader's interval on "
        "it, less the decision's equivalence margin and drift (quantbench.decision.margins)."
    )
    bound: float = Field(
        description="The most this setting could deliver at any skipped load (at or above its "
        "lowest measured concurrency, up to the grid's highest load, serving at most the batch "
        "limit at once), or at a stopped point (the high end of its row's interval)."
    )
    skipped: list[str] = Field(description="The load points not run.")
    stopped: list[str] = Field(
        default_factory=list,
        description="The load points stopped part-way, from the workload's min_requests on, once "
        "their own interval lay below the leader's (the leader: the best row of this pair so "
        "far, this setting's earlier points included).",
    )


class ServedCheck(Strict):
    """The server's greedy answers against the variant's offline reference (quantbench.fidelity):
    a server that answers otherwise where the reference is certain serves something else."""

    verdict: Literal["match", "mismatch", "undecided", "not checked"]
    decided: int = 0
    mismatched: int = 0
    prompts: int = 0
    checks: list[dict[str, Any]] = Field(default_factory=list)
    note: str = ""


HELDOUT_TASK = "quantbench_heldout"
"""The lm-eval name of the fine-tune's own task (the held-out questions)."""


class TaskScore(Strict):
    """One task's accuracy through a server (lm-evaluation-harness against its chat endpoint),
    every answer kept so a reader can check the judging."""

    task: str = Field(description="The lm-eval task's name (quantbench_heldout: the fine-tune's).")
    metric: str = Field(description="The metric scored (acc for the fine-tune's task).")
    correct: int | None = Field(description="Right answers (None where the metric is not a count).")
    total: int = Field(description="Questions asked.")
    accuracy: float = Field(description="The task's metric, 0-1.")
    interval: tuple[float, float] | None = Field(
        description="Wilson interval of the accuracy at the run's confidence (None where the "
        "metric is not a proportion of answers)."
    )
    answers: list[HeldoutAnswer] = Field(default_factory=list)


class TaskAgreement(Strict):
    """The fine-tune's task served against the same questions answered offline (the evaluate
    stage, on the variant's weights), question by question."""

    served_only: int = Field(description="Questions right served and wrong offline.")
    offline_only: int = Field(description="Questions right offline and wrong served.")
    both: int
    neither: int
    difference: Figure = Field(
        description="served accuracy - offline accuracy, Newcombe's paired interval."
    )
    p_value: float = Field(description="Exact McNemar test (two-sided) on the discordant ones.")
    differs: bool = Field(description="p_value below 1 - confidence: beyond noise.")


class ServedTask(Strict):
    """The pair's tasks scored through its own bench server (the first server point's)."""

    verdict: Literal["agrees", "differs", "not compared", "not scored"]
    server_point: str | None = Field(description="The server that answered (None: none did).")
    scores: list[TaskScore] = Field(default_factory=list)
    agreement: TaskAgreement | None = Field(
        default=None, description="Against the offline answers (None: no offline answers)."
    )
    harness: str = Field("", description="lm-evaluation-harness's version.")
    seconds: float | None = Field(default=None, description="Wall time of the scoring.")
    note: str = ""


class ServerPoint(Strict):
    server_point: str
    settings: dict[str, Any]
    command: list[str]
    env: dict[str, str]
    report: ServerReport
    error: str | None = Field(description="Why the server failed (None: it ran).")
    search: dict[str, SearchInfo] = Field(
        default_factory=dict,
        description="bench.mode search: the SLO-edge search of each workload on this server "
        "(empty in grid mode).",
    )
    served_check: ServedCheck | None = None
    is_default: bool = Field(
        False,
        description="Whether this point changed none of the pair's configured settings (the "
        "'default' of tuned vs default).",
    )
    off_engine_defaults: dict[str, Any] = Field(
        default_factory=dict,
        description="The engine's tuning settings this point holds at other values than the "
        "engine's own defaults (its flags left out): empty for the engine's true default.",
    )
    raced: dict[str, RaceDrop] = Field(
        default_factory=dict,
        description="Grid mode: per workload, the load points the race across settings skipped "
        "(bench.race).",
    )


def _searches_by_workload(data: dict[str, Any]) -> None:
    """Version 2 -> 3: a server's one search was its last workload's (the others were lost)."""
    last = (data.get("workloads") or ["?"])[-1]
    for server in data.get("servers", []):
        found = server.get("search")
        server["search"] = {} if found is None else {last: found}


class PairSummary(StageOutput):
    """One bench stage's result."""

    OUTPUT: ClassVar[str] = "reports/bench/{pair}/summary.json"
    STAGE: ClassVar[str] = "bench@{pair}"
    # version 2: rows per workload with intervals and checks, best per workload, ties
    # version 3: each server's search per workload (version 2 kept only the last workload's)
    # version 4: a search may be dropped by the race across settings (SearchInfo.dropped)
    # version 5: grid points skipped by the race (ServerPoint.raced), and each server point's
    # departures from the engine's own defaults (ServerPoint.off_engine_defaults)
    # version 6: the fine-tune's task scored through the pair's server (PairSummary.task)
    # version 7: a pair that starts no server on this machine says why (PairSummary.not_served)
    # version 8: a pair the quality gate excludes is measured at its floor and says why (screened)
    # version 9: grid points the race stopped part-way (RaceDrop.stopped)
    # version 10: the GPUs' counters over each row's windows (BenchRow.gpu; none without a GPU)
    MIGRATIONS: ClassVar[Migrations] = {
        2: stamp(3, nested=_searches_by_workload),
        3: stamp(4),
        4: stamp(5),
        5: stamp(6),
        6: stamp(7),
        7: stamp(8),
        8: stamp(9),
        9: stamp(10),
    }

    schema_version: Literal[10] = version(10)
    pair: str
    variant: str
    format: str
    engine: str
    engine_version: str
    mode: Literal["grid", "search"]
    slo: str = Field(description="The SLO text the rows were judged by.")
    ranked_by: Literal["good_output_throughput", "output_throughput"]
    workloads: list[str] = Field(description="The workloads run, in order.")
    slos: dict[str, str] = Field(description="Each workload's SLO profile.")
    price_per_hour: float
    currency: str
    host: str = Field(
        "127.0.0.1", description="Where the servers bound (bench.host; loopback unless opted out)."
    )
    server_points: int
    rows: list[BenchRow]
    servers: list[ServerPoint]
    best: dict[str, BenchRow | None] = Field(
        description="Per workload, the row to deploy (None: none met its SLO and checks)."
    )
    ties: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per workload, the rows (server/workload/load keys) the best could not be "
        "separated from beyond noise.",
    )
    decided_by: dict[str, str] = Field(
        default_factory=dict, description="Per workload, the rule that picked the best."
    )
    resumed_points: int = Field(0, description="Points reused from an interrupted earlier run.")
    task: ServedTask | None = Field(
        default=None,
        description="The fine-tune's task (and any standard lm-eval tasks) scored through the "
        "pair's server; None where served_task.enabled is false.",
    )
    not_served: str | None = Field(
        default=None,
        description="Why this pair started no server on this machine (its engine cannot serve "
        "the variant here and its fallback pair does, or it is the fallback of a pair that "
        "runs here: bench.pairs.<name>.fallback_for); None: it ran.",
    )
    screened: str | None = Field(
        default=None,
        description="Why the decision can never rank this pair's variant, as its evaluate stage "
        "showed (report.quality): it was served on one server setting and each point measured "
        "at its workload's precision floor (bench.quality_gated: screen); None: measured in "
        "full.",
    )
    wall_seconds: float

    def server(self, label: str) -> ServerPoint | None:
        return next((s for s in self.servers if s.server_point == label), None)


__all__ = [
    "HEADLINE_FIGURES",
    "BenchRow",
    "CacheSummary",
    "Interval",
    "LoadSummary",
    "PairSummary",
    "RaceDrop",
    "SearchInfo",
    "ServedCheck",
    "ServerPoint",
    "ServerReport",
    "TriedLoad",
]
