"""Measure a bench row once more: its pair's server at its setting, its workload's load point,
with a fresh repeat (its own prompts and seed), checked as the bench stage checks a row.

The decide stage uses it to measure contending rows in alternation. Servers are started on
demand and kept while a comparison still needs them (:meth:`RowServers.keep_only` stops the
rest), so two rows of a comparison alternate without restarting either server; an idle server
costs nothing here (llama-server and ``transformers serve`` sleep on their sockets, vLLM's engine
blocks on its input queue).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench.bench.run import PairJob
from quantbench.decision.rows import checks, fold_repeats, row_figure
from quantbench.engines.base import EngineSettings, LaunchSpec
from quantbench.engines.server import Server, ServerError, describe_exit
from quantbench.load.forkserver import load_processes
from quantbench.load.session import Target, run_session
from quantbench.ports import free_port
from quantbench.precision import Figure
from quantbench.workloads.spec import WorkloadSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowKey:
    """pair/server point/workload/load point, as the report keys a row."""

    pair: str
    server_point: str
    workload: str
    load_point: str

    @classmethod
    def parse(cls, key: str) -> RowKey:
        parts = key.split("/")
        if len(parts) != 4:
            raise ValueError(f"row key {key!r}: expected pair/server point/workload/load point")
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.pair}/{self.server_point}/{self.workload}/{self.load_point}"


@dataclass
class Remeasured:
    """One measurement of a row: its folded, checked row (a dict like the bench stage's) and
    the ranked figure."""

    key: str
    row: dict[str, Any]
    figure: Figure | None
    wall_s: float
    records: Path | None
    error: str | None = None


def timed(spec: WorkloadSpec, index: int, duration_s: float) -> WorkloadSpec:
    """The workload with point ``index`` measured for ``duration_s`` seconds (no request count,
    no precision target): the same load, prompts and label, another length of window."""
    points = list(spec.points)
    points[index] = points[index].model_copy(update={"num_requests": None, "duration_s": None})
    return spec.model_copy(
        update={"load": points, "precision": None, "num_requests": None, "duration_s": duration_s}
    )


class RowServers:
    """Servers for the rows of several pairs, started when first needed, stopped on request."""

    def __init__(self, jobs: dict[str, PairJob], out_dir: Path) -> None:
        self.jobs = jobs
        self.out_dir = out_dir
        self.running: dict[tuple[str, str], Server] = {}
        self.failed: dict[tuple[str, str], str] = {}
        self.used: dict[tuple[str, str], Server] = {}
        # every round's load process forked from one template, until close()
        self._loads = contextlib.ExitStack()
        self._loads.enter_context(load_processes())

    def _settings(self, job: PairJob, server_point: str) -> EngineSettings:
        for label, settings in job.settings.sweep_points():
            if label == server_point:
                return settings
        raise ValueError(f"{job.name}: no server setting {server_point!r} in its sweep")

    def server(self, pair: str, server_point: str) -> Server:
        """The running server of that pair's setting, started (and warmed up) if it is not."""
        key = (pair, server_point)
        if key in self.failed:
            raise ServerError(self.failed[key])
        if key in self.running:
            return self.running[key]
        return self._ready(key, self._launch(key))

    def _launch(self, key: tuple[str, str]) -> Server:
        """The server of ``key``, its process started (not yet ready)."""
        pair, server_point = key
        job = self.jobs[pair]
        settings = self._settings(job, server_point)

        def relaunch() -> LaunchSpec:
            return job.engine.launch(
                job.artifact, settings, job.bench.host, free_port(job.bench.host)
            )

        folder = self.out_dir / "servers" / pair / server_point
        folder.mkdir(parents=True, exist_ok=True)
        server = Server(relaunch(), folder / "server.log", relaunch=relaunch)
        self.used[key] = server
        try:
            server.start()
        except ServerError as exc:
            server.stop()
            self.failed[key] = str(exc)
            raise
        return server

    def _ready(self, key: tuple[str, str], server: Server) -> Server:
        """``server`` (of ``key``) once it is up and warmed up; a failure is recorded."""
        job = self.jobs[key[0]]
        try:
            server.ready()
            server.warmup(timeout_s=min(s.timeout_s for s in job.workloads.values()))
        except ServerError as exc:
            server.stop()
            self.failed[key] = str(exc)
            raise
        self.running[key] = server
        return server

    def start(self, needed: set[tuple[str, str]]) -> None:
        """Start those of ``needed`` that are not running, side by side: a start is mostly a
        process importing its engine, so two booting at once are up sooner than one after the
        other (two vLLM starts in 44 s on 2 cores, one alone 22-29 s); nothing is measured
        while they start. Every process is started from this thread, then waited for in turn (a
        server started from a worker thread is stopped when that thread ends: Server.ready).
        A server that fails is recorded, and its rows' measuring says so."""
        todo = sorted(k for k in needed if k not in self.running and k not in self.failed)
        launched = []
        for key in todo:
            with contextlib.suppress(ServerError):
                launched.append((key, self._launch(key)))
        for key, server in launched:
            with contextlib.suppress(ServerError):
                self._ready(key, server)

    def start_s(
        self, needed: set[tuple[str, str]], measured: dict[tuple[str, str], float]
    ) -> float:
        """Seconds starting those of ``needed`` that are not running would take: the sum of each
        one's start at the bench (``measured``), else its engine's estimate. Side by side
        (:meth:`start`) they take less, though not the longest alone: two vLLM starts were up in
        44 s on 2 cores where they took 22 and 29 s alone; the sum never comes up short."""
        return sum(
            measured.get(key) or self.jobs[key[0]].engine.startup_estimate_s
            for key in needed
            if key not in self.running and key not in self.failed
        )

    def keep_only(self, needed: set[tuple[str, str]]) -> None:
        """Stop every running server not in ``needed``."""
        for key in [k for k in self.running if k not in needed]:
            self.running.pop(key).__exit__(None, None, None)

    def close(self) -> None:
        self.keep_only(set())
        self._loads.close()

    def reports(self) -> list[tuple[str, str, dict[str, Any] | None, str | None]]:
        """(pair, server point, the server's report, its error) of every server used."""
        out = []
        for (pair, point), server in self.used.items():
            report = server.report() if server.process is not None else None
            out.append((pair, point, report, self.failed.get((pair, point))))
        return out

    def measure(
        self, key: str, repeat: int, metric: str, folder: Path, duration_s: float | None = None
    ) -> Remeasured:
        """Run the row's load point once more (repeat index ``repeat``, so its own prompts and
        arrival seed), fold and check it as the bench stage does, and read its ranked figure.
        ``duration_s``: measure for that long instead of the point's own size (a round of the
        decide stage compares throughput; the row's SLO verdict was decided at full size)."""
        rk = RowKey.parse(key)
        job = self.jobs[rk.pair]
        spec = job.workloads[rk.workload]
        index = next(
            (i for i in range(len(spec.points)) if spec.point_label(i) == rk.load_point), None
        )
        if index is None:
            raise ValueError(f"{key}: workload {rk.workload} has no load point {rk.load_point}")
        if duration_s is not None:
            spec = timed(spec, index, duration_s)
        server = self.server(rk.pair, rk.server_point)
        started = time.perf_counter()  # the measuring only: a server start is its own report's
        settings = self._settings(job, rk.server_point)
        server.check_alive(f"before measuring {key} again")
        reset = job.engine.reset_prefix_cache(server.url, settings)
        target = Target(
            url=server.url, engine=job.engine.profile.name, model=server.spec.model_name,
            tokenizer=job.tokenizer,
        )  # fmt: skip
        summary = run_session(
            spec, target, folder, slo=job.slo_for(rk.workload) or None,
            traffic=job.traffic[rk.workload], confidence=job.bench.confidence, repeat=repeat,
            points=[index],
        )  # fmt: skip
        traffic = job.traffic[rk.workload]
        row = fold_repeats(
            summary.points,
            workload=rk.workload,
            confidence=job.bench.confidence,
            price_per_hour=job.bench.price_per_hour,
            possible_cache_share=traffic.summary.prefix_reuse_share if traffic.summary else None,
        )
        row.update(
            server_point=rk.server_point,
            load_point=rk.load_point,
            shape=spec.points[index].model_dump(mode="json"),
            cache={**row["cache"], "reset": reset},
        )
        code = server.exit_code_now()
        if code is not None:
            row["error"] = f"server {describe_exit(code)} during this point"
            self.running.pop((rk.pair, rk.server_point), None)
        row = checks(row)  # the served check ran when the bench stage started this setting
        return Remeasured(
            key=key,
            row=row,
            figure=row_figure(row, metric),
            wall_s=round(time.perf_counter() - started, 1),
            records=folder / "records.jsonl",
            error=row.get("error"),
        )
