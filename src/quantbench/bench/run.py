"""Benchmark one variant on one engine: each server setting once, every load point against it.

The server is started once per server-setting point (never per load point: only load settings
change between those), warmed up, driven through the load points (grid) or an SLO-edge search,
and stopped. Failures cost one data point, not the run: a server that does not start, dies, or a
load process that fails is recorded with its reason and the rest goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench import slo as slo_mod
from quantbench.bench.results import failed_row, fold_repeats, pick_best
from quantbench.bench.search import find_edge, grid_size
from quantbench.bench.spec import BenchSettings
from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineSettings
from quantbench.engines.ports import PortInUseError, free_port
from quantbench.engines.server import Server, ServerError, describe_exit
from quantbench.load.metrics import PointResult
from quantbench.load.session import Target, run_session
from quantbench.load.spec import ClosedLoop, LoadPoint, OpenLoop, WorkloadSpec
from quantbench.schemas.bench import (
    BenchRow,
    PairSummary,
    SearchInfo,
    ServerPoint,
    ServerReport,
    TriedLoad,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PairJob:
    """Everything one bench stage needs."""

    name: str
    artifact: Artifact
    engine: Engine
    settings: EngineSettings
    workload: WorkloadSpec
    slo: str
    bench: BenchSettings
    tokenizer: str | None = None


def _label(point: LoadPoint) -> str:
    return point.label or point.default_label()


def _changed(settings: EngineSettings, base: EngineSettings) -> dict[str, Any]:
    """The settings a sweep point changed, for labels and reports."""
    now, before = settings.model_dump(mode="json"), base.model_dump(mode="json")
    return {k: v for k, v in now.items() if k != "sweep" and before.get(k) != v}


class _PointRunner:
    """Runs load points (with repeats) against one live server."""

    def __init__(self, job: PairJob, server: Server, out_dir: Path) -> None:
        self.job = job
        self.server = server
        self.out_dir = out_dir
        self.target = Target(
            url=server.url,
            engine=job.engine.profile.name,
            model=server.spec.model_name,
            tokenizer=job.tokenizer,
        )

    def run(self, point: LoadPoint) -> dict[str, Any]:
        label = _label(point)
        results: list[PointResult] = []
        for repeat in range(self.job.bench.repeats):
            self.server.check_alive(f"before load point {label}")
            workload = self.job.workload.model_copy(update={"load": [point]})
            run_dir = self.out_dir / label / f"r{repeat}"
            log.info("%s: load point %s, repeat %d", self.job.name, label, repeat + 1)
            summary = run_session(workload, self.target, run_dir, slo=self.job.slo or None)
            results.extend(summary.points)
            if self.server.process is not None and self.server.process.poll() is not None:
                break  # the server died during this point: keep what was measured, stop here
        row = fold_repeats(
            results,
            confidence=self.job.bench.confidence,
            price_per_hour=self.job.bench.price_per_hour,
        )
        row.update(load_point=label, shape=point.model_dump(mode="json"), error=None)
        code = self.server.process.poll() if self.server.process is not None else None
        if code is not None:
            row["error"] = f"server {describe_exit(code)} during this point"
            row["slo_passed"] = False
        return row


def _search_point(job: PairJob, load: float) -> LoadPoint:
    search = job.bench.search
    if search.kind == "concurrency":
        return ClosedLoop(concurrency=int(load), num_requests=search.num_requests)
    return OpenLoop(rate=load, num_requests=search.num_requests)


def _run_search(job: PairJob, runner: _PointRunner, rows: list[dict[str, Any]]) -> SearchInfo:
    """Find the SLO edge, appending each tried point's row to `rows` as soon as it is measured
    (so a server that dies half-way through the search keeps the points measured before)."""
    search = job.bench.search
    integer = search.kind == "concurrency"

    def passes(load: float) -> bool:
        row = runner.run(_search_point(job, load))
        rows.append(row)
        return bool(row["slo_passed"]) and not row.get("error")

    edge = find_edge(passes, search.start, search.max, integer=integer, precision=search.precision)
    return SearchInfo(
        kind=search.kind,
        edge=edge.edge,
        tried=[TriedLoad(load=load, passed=ok) for load, ok in edge.tried],
        runs=edge.runs,
        grid_size=grid_size(search.start, search.max, integer, search.precision),
    )


def run_pair(job: PairJob, out_dir: Path) -> PairSummary:
    """Run the whole pair into out_dir and return its summary (written by the caller).

    Rows are computed as dicts (bench.results) and validated into the summary's schema here,
    so a row that drifts from :class:`~quantbench.schemas.bench.BenchRow` fails the stage."""
    constraints = slo_mod.parse_slo(job.slo) if job.slo.strip() else []
    rank_by_goodput = bool(slo_mod.per_request(constraints))
    server_points = job.settings.sweep_points()
    rows: list[dict[str, Any]] = []
    servers: list[ServerPoint] = []
    started = time.time()
    for server_label, settings in server_points:
        launch = job.engine.launch(
            job.artifact, settings, job.bench.host, free_port(job.bench.host)
        )
        point_dir = out_dir / server_label
        server = Server(launch, point_dir / "server.log")
        common = {
            "server_point": server_label,
            "settings": _changed(settings, job.settings),
            "command": launch.redacted_argv(),
            "env": launch.redacted_env(),
        }
        planned: Sequence[LoadPoint] = job.workload.load if job.bench.mode == "grid" else []
        done: list[dict[str, Any]] = []
        search_info: SearchInfo | None = None
        error: str | None = None
        try:
            with server:
                server.warmup(timeout_s=job.workload.timeout_s)
                runner = _PointRunner(job, server, point_dir)
                if job.bench.mode == "grid":
                    for point in planned:
                        try:
                            done.append(runner.run(point))
                        except RuntimeError as exc:  # a load process failed: lose this point only
                            log.error("%s %s: %s", job.name, _label(point), exc)
                            row = failed_row(f"load generator failed: {exc}")
                            row.update(
                                load_point=_label(point), shape=point.model_dump(mode="json")
                            )
                            done.append(row)
                else:
                    search_info = _run_search(job, runner, done)
        except (ServerError, PortInUseError) as exc:
            error = str(exc)
            log.error("%s %s: %s", job.name, server_label, error.splitlines()[0])
        finished = {row["load_point"] for row in done}
        for point in planned:  # points the failure took away, recorded as such
            if _label(point) not in finished:
                row = failed_row(error or "not run")
                row.update(load_point=_label(point), shape=point.model_dump(mode="json"))
                done.append(row)
        if error is not None and job.bench.mode == "search":  # the search the failure cut short
            row = failed_row(error)
            row.update(load_point="search", shape=None)
            done.append(row)
        for row in done:
            rows.append({**common, **row})
        servers.append(
            ServerPoint(
                **common,
                report=ServerReport.model_validate(server.report()),
                error=error,
                search=search_info,
            )
        )
    best = pick_best(rows, rank_by_goodput)
    return PairSummary(
        pair=job.name,
        variant=job.artifact.name,
        format=job.artifact.format,
        engine=job.engine.name,
        engine_version=_safe_version(job),
        mode=job.bench.mode,
        slo=job.slo,
        ranked_by="goodput" if rank_by_goodput else "output_throughput",
        price_per_hour=job.bench.price_per_hour,
        currency=job.bench.currency,
        server_points=len(server_points),
        rows=[BenchRow.model_validate(row) for row in rows],
        servers=servers,
        best=BenchRow.model_validate(best) if best is not None else None,
        wall_seconds=round(time.time() - started, 1),
    )


def _safe_version(job: PairJob) -> str:
    try:
        return job.engine.version(job.settings)
    except Exception as exc:  # a version string must never fail a finished benchmark
        return f"unknown ({type(exc).__name__})"
