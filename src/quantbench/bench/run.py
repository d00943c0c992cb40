"""Benchmark one variant on one engine: each server setting once, every workload's load points
against it, every point checked before it may be ranked.

Per server setting the server is started once (never per load point: only load settings change
between those) and warmed up; its greedy answers are checked against the variant's offline
reference (served is what was evaluated); then, per workload, its load points run (grid) or its
SLO edge is searched, each point after the server's prefix cache was emptied, with repeats.
Failures cost one data point, not the run: a server that does not start or dies, or a load
process that fails, is recorded with its reason and the rest goes on. Every finished point is kept
where an interrupted stage's next run finds it (:mod:`quantbench.bench.resume`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantbench import slo as slo_mod
from quantbench.bench.resume import PartialStore
from quantbench.bench.search import find_edge, grid_size, reach_bound
from quantbench.bench.spec import BenchSettings
from quantbench.bench.task import TaskJob, score_on
from quantbench.bench.task import mismatch as task_mismatch
from quantbench.decision.margins import DecisionMargins
from quantbench.decision.rows import (
    checks,
    failed_row,
    fold_repeats,
    metric_bounds,
    pick_best,
    rank_metric,
)
from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineSettings, LaunchSpec
from quantbench.engines.server import Server, ServerError, describe_exit
from quantbench.estimate.pair_probe import not_probed, probe_on, probe_point
from quantbench.estimate.spec import ProbeSettings
from quantbench.fidelity import ReferenceAnswer, check_served, summarize_checks
from quantbench.load.forkserver import load_processes
from quantbench.load.metrics import PointResult
from quantbench.load.race import ON_CEILING, RACE_STOP, ceiling, race_levels
from quantbench.load.records import read_records
from quantbench.load.session import Target, run_session
from quantbench.ports import PortInUseError, free_port
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import (
    BenchRow,
    PairSummary,
    RaceDrop,
    SearchInfo,
    ServedCheck,
    ServedTask,
    ServerPoint,
    ServerReport,
    TriedLoad,
)
from quantbench.schemas.machine import PairCalibration
from quantbench.workloads.plan import Precision, RaceFloor
from quantbench.workloads.spec import ClosedLoop, LoadPoint, OpenLoop, WorkloadSpec
from quantbench.workloads.traffic import Traffic

log = logging.getLogger(__name__)


@dataclass
class PairJob:
    """Everything one bench stage needs."""

    name: str
    artifact: Artifact
    engine: Engine
    settings: EngineSettings
    workloads: dict[str, WorkloadSpec]
    traffic: dict[str, Traffic]
    slo: slo_mod.Slo
    """The SLO of workloads that name none of their own."""
    bench: BenchSettings
    tokenizer: str | None = None
    references: list[ReferenceAnswer] = field(default_factory=list)
    """The variant's offline greedy answers (evaluate stage) for the served check."""
    task: TaskJob | None = None
    """The fine-tune's task to score through the pair's server (None: served_task disabled)."""
    store: PartialStore | None = None
    not_served: str | None = None
    """Why this pair starts no server on this machine (quantbench.bench.served_here; None: it
    runs): its summary then has no server and says so."""
    screened: str | None = None
    """Why the decision can never rank this pair's variant (its quality report against
    ``report.quality``; quantbench.decision.gate.shown_unrankable): it is served on one server
    setting, its points at their precision floor (``bench.quality_gated: screen``)."""
    probe: ProbeSettings | None = None
    """Probe the pair's server for the estimate (quantbench.estimate.pair_probe) on the sweep's
    setting that batches most, before its points; ``run_pair`` writes it to ``probe.json``
    (None: no probe, as in the decide stage's measurements again)."""
    margins: DecisionMargins = field(default_factory=DecisionMargins)
    """The decision's equivalence margin and drift (``report:``): the race stops only what the
    decision could not rank first (quantbench.decision.margins)."""

    def race_floor(self, leader: dict[str, Any], metric: str) -> float:
        """The level a point's high end must fall below to lose to ``leader`` beyond what the
        decision allows: its low end less the equivalence margin and the drift."""
        return metric_bounds(leader, metric)[0] * self.margins.race_share(self.bench.confidence)

    def slo_for(self, workload: str) -> slo_mod.Slo:
        return self.workloads[workload].slo_text(self.slo)


def _label(point: LoadPoint) -> str:
    return point.label or point.default_label()


def _changed(settings: EngineSettings, base: EngineSettings) -> dict[str, Any]:
    """The settings a sweep point changed, for labels and reports."""
    now, before = settings.model_dump(mode="json"), base.model_dump(mode="json")
    return {k: v for k, v in now.items() if k != "sweep" and before.get(k) != v}


def served_check(server: Server, references: Sequence[ReferenceAnswer]) -> ServedCheck:
    """The server's greedy answers against the reference's certain prefixes."""
    if not references:
        return ServedCheck(verdict="not checked", note="no reference answers for this variant")
    checks_done = []
    for ref in references:
        try:
            answer = server.chat(ref.prompt, max_tokens=max(1, len(ref.ids)))
        except (OSError, ValueError) as exc:
            return ServedCheck(verdict="not checked", note=f"the check request failed: {exc}")
        checks_done.append(check_served(ref, answer))
    summary = summarize_checks(checks_done)
    return ServedCheck(
        verdict=summary["verdict"],
        decided=summary["decided"],
        mismatched=summary["mismatched"],
        prompts=summary["prompts"],
        checks=summary["checks"],
    )


class _PointRunner:
    """Runs one workload's load points (with repeats) against one live server."""

    def __init__(self, job: PairJob, server: Server, server_label: str, server_dir: Path) -> None:
        self.job = job
        self.server = server
        self.server_label = server_label
        self.server_dir = server_dir
        self.target = Target(
            url=server.url,
            engine=job.engine.profile.name,
            model=server.spec.model_name,
            tokenizer=job.tokenizer,
        )

    def run(
        self, workload: str, spec: WorkloadSpec, index: int, race: RaceFloor | None = None
    ) -> dict[str, Any]:
        """Every repeat of point ``index`` of ``spec``, folded into a row; ``race``: each
        repeat stops once it cannot reach this leader."""
        point = spec.points[index]
        label = _label(point)
        results: list[PointResult] = []
        slo = self.job.slo_for(workload)
        resets: list[str] = []
        for repeat in range(self.job.bench.repeats):
            self.server.check_alive(f"before load point {label}")
            # a point's prompts must not be served from the previous point's cache
            resets.append(self.job.engine.reset_prefix_cache(self.server.url, self.server_settings))
            run_dir = self.server_dir / workload / label / f"r{repeat}"
            log.info("%s: %s %s, repeat %d", self.job.name, workload, label, repeat + 1)
            summary = run_session(
                spec, self.target, run_dir, slo=slo or None, traffic=self.job.traffic[workload],
                confidence=self.job.bench.confidence, repeat=repeat, points=[index], race=race,
            )  # fmt: skip
            results.extend(summary.points)
            if self.server.exit_code_now() is not None:
                break  # the server died during this point: keep what was measured, stop here
        traffic = self.job.traffic[workload]
        row = fold_repeats(
            results,
            workload=workload,
            confidence=self.job.bench.confidence,
            price_per_hour=self.job.bench.price_per_hour,
            possible_cache_share=traffic.summary.prefix_reuse_share if traffic.summary else None,
            drift=self.job.margins.drift,  # repeats pooled with the run-to-run spread
        )
        row.update(load_point=label, shape=point.model_dump(mode="json"))
        # what was done to the engine's prefix cache before each repeat, as the row's record
        row["cache"] = {**row["cache"], "reset": "; ".join(dict.fromkeys(resets)) or None}
        code = self.server.exit_code_now()
        if code is not None:
            row["error"] = f"server {describe_exit(code)} during this point"
        return row

    server_settings: Any = None


def _search_point(job: PairJob, load: float, run: int = 1) -> LoadPoint:
    """A tried load, sized by search.num_requests or else by its workload (which the params
    checks made large enough for the largest concurrency the search may try). A load run again
    (to confirm the edge) is labelled ``c4.2`` (its second run): its own row, prompts and seed."""
    search = job.bench.search
    point: LoadPoint
    if search.kind == "concurrency":
        point = ClosedLoop(concurrency=int(load), num_requests=search.num_requests)
    else:
        point = OpenLoop(rate=load, num_requests=search.num_requests)
    if run > 1:
        point = point.model_copy(update={"label": f"{point.default_label()}.{run}"})
    return point


def _ranked_by_goodput(job: PairJob, workload: str) -> bool:
    return bool(job.slo_for(workload).per_request)


@dataclass
class _Race:
    """The race across settings for one server setting and workload (bench.race): the best row
    of the settings run before it is the leader; this setting's rows so far bound what it could
    deliver (``reach_bound``) at any concurrency up to ``reach``, with at most ``max_batch``
    requests served at once; once that bound is below the low end of the leader's interval, the
    setting cannot win beyond noise."""

    workload: str
    leader: dict[str, Any]
    metric: str
    floor: float
    reach: int
    max_batch: int | None
    top_label: str

    def measured(self, mine: Sequence[dict[str, Any]]) -> list[tuple[int, float, float | None]]:
        """(streams, upper end of the ranked figure, mean requests in flight) of each row: the
        requests in flight say how much of the time its streams kept the engine busy."""
        return [
            (
                int(r["shape"]["concurrency"]),
                metric_bounds(r, self.metric)[1],
                (r.get("load") or {}).get("mean_in_flight"),
            )
            for r in mine
            if r["workload"] == self.workload
            and r.get(self.metric) is not None
            and (r.get("shape") or {}).get("concurrency")
        ]

    def bound(self, mine: Sequence[dict[str, Any]]) -> float | None:
        """What this setting could deliver at most, or None while it could still win."""
        bound = reach_bound(self.measured(mine), self.reach, self.max_batch)
        return bound if bound is not None and bound < self.floor else None

    def reason(self, bound: float) -> str:
        batch = f", serving at most {self.max_batch} at once" if self.max_batch else ""
        return (
            f"cannot reach the leader ({self.leader_label}, {self.floor:.1f} "
            f"{self.metric.replace('_', ' ')}: its interval's low end less the decision's "
            f"margins): at most "
            f"{bound:.1f} at any concurrency up to {self.top_label} {self.reach}{batch}"
        )

    @property
    def leader_label(self) -> str:
        return f"{self.leader['server_point']} at {self.leader['load_point']}"


def _race(
    job: PairJob,
    workload: str,
    earlier: Sequence[dict[str, Any]],
    max_batch: int | None,
) -> _Race | None:
    """The race for one server setting and workload, or None: the race is off, there is no
    leader yet, or the load is not counted in streams. It reaches the highest load the setting
    could be run at, not its batch limit: streams that think between turns leave the batch idle,
    so more of them than it holds can still add throughput (``reach_bound`` caps the requests
    served at once instead)."""
    if not job.bench.race:
        return None
    if job.bench.mode == "search":
        if job.bench.search.kind != "concurrency":
            return None
        top, top_label = int(job.bench.search.max), "search.max"
    else:
        streams = [
            p.concurrency for p in job.workloads[workload].points if isinstance(p, ClosedLoop)
        ]
        if not streams:
            return None
        top, top_label = max(streams), "the grid's highest load"
    by_goodput = _ranked_by_goodput(job, workload)
    leader, _, _ = pick_best([r for r in earlier if r["workload"] == workload], by_goodput)
    if leader is None:
        return None
    metric = rank_metric(by_goodput)
    return _Race(
        workload, leader, metric, job.race_floor(leader, metric), top, max_batch, top_label
    )


def _race_floor(job: PairJob, workload: str, rows: Sequence[dict[str, Any]]) -> RaceFloor | None:
    """Grid mode: the leader a precision-sized point races while it is measured (the best row
    of this pair so far: the settings run before and this setting's earlier points), or None:
    the race is off, the point is not precision-sized, or no row leads yet. A point that cannot
    reach it stops from the workload's ``min_requests`` on, a closed loop from its first look
    where its streams' ceiling shows it: listing a workload's highest load first lets its lower
    loads stop there once they cannot win (params.yaml's chat workload)."""
    spec = job.workloads[workload]
    if not job.bench.race or spec.precision is None:
        return None
    if spec.precision.max_requests <= spec.precision.min_requests:
        return None  # measured at its floor (a screened pair's points): nothing left to save
    by_goodput = _ranked_by_goodput(job, workload)
    leader, _, _ = pick_best([r for r in rows if r["workload"] == workload], by_goodput)
    if leader is None:
        return None
    metric = rank_metric(by_goodput)
    p = spec.precision
    first, interval, ceiling_level = race_levels(
        p.min_requests, p.max_requests, job.bench.confidence, Precision.check_every
    )
    return RaceFloor(
        metric=metric,
        floor=job.race_floor(leader, metric),
        leader=f"{leader['server_point']} @ {leader['load_point']}",
        slo=job.slo_for(workload),
        after=p.min_requests,
        confidence=interval,
        first_look=first,
        ceiling_confidence=ceiling_level,
    )


def _give_up(race: _Race | None, mine: Sequence[dict[str, Any]]) -> Callable[[], str | None] | None:
    """The search's ``give_up`` from a race: its reason once the bound falls below the leader."""
    if race is None:
        return None

    def give_up() -> str | None:
        bound = race.bound(mine)
        return None if bound is None else race.reason(bound)

    return give_up


def _skip_in_race(
    race: _Race | None, point: LoadPoint, mine: Sequence[dict[str, Any]]
) -> float | None:
    """Grid mode: the bound that lets this point be skipped, or None to run it. Only a closed
    loop at or above the lowest concurrency measured is covered by the bound."""
    if race is None or not isinstance(point, ClosedLoop):
        return None
    measured = race.measured(mine)
    if not measured or point.concurrency < min(c for c, _, _ in measured):
        return None
    return race.bound(mine)


def _run_search(
    job: PairJob,
    runner: _PointRunner,
    workload: str,
    keep: Callable[[dict[str, Any]], Any],
    give_up: Callable[[], str | None] | None = None,
) -> SearchInfo:
    """Find the SLO edge, handing each tried point's row to `keep` as soon as it is measured
    (so a server that dies half-way through the search keeps the points measured before);
    ``give_up`` (the race across settings) may stop it early."""
    search = job.bench.search
    integer = search.kind == "concurrency"
    spec = job.workloads[workload]

    runs_at: dict[float, int] = {}

    def passes(load: float) -> bool:
        runs_at[load] = runs_at.get(load, 0) + 1
        point = _search_point(job, load, runs_at[load])
        one = spec.model_copy(update={"load": [point]})
        row = keep(runner.run(workload, one, 0))
        return bool(row.get("rankable"))

    edge = find_edge(
        passes,
        search.start,
        search.max,
        integer=integer,
        precision=search.precision,
        confirm=search.confirm,
        max_runs=search.max_runs,
        confidence=job.bench.confidence,
        give_up=give_up,
    )
    if edge.dropped:
        log.info("%s %s: search stopped: %s", job.name, workload, edge.dropped)
    return SearchInfo(
        kind=search.kind,
        edge=edge.edge,
        tried=[TriedLoad(load=load, passed=ok) for load, ok in edge.tried],
        runs=edge.runs,
        grid_size=grid_size(search.start, search.max, integer, search.precision),
        fitted={f"{load:g}": rate for load, rate in sorted(edge.fitted.items())},
        interval=list(edge.interval) if edge.interval is not None else None,
        confidence=edge.confidence,
        dropped=edge.dropped,
    )


def _planned(job: PairJob) -> list[tuple[str, int]]:
    if job.bench.mode != "grid":
        return []
    return [(w, i) for w, spec in job.workloads.items() for i in range(len(spec.points))]


@dataclass
class _ServerRun:
    """What one server setting gave: its rows (reused or measured), its server record, how
    many points were reused, and the served task and probe where this server was asked them."""

    rows: list[dict[str, Any]]
    info: ServerPoint
    reused: int
    task: ServedTask | None = None
    probe: PairCalibration | None = None


def _reused_rows(
    job: PairJob, server_label: str, planned: list[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """The planned points of this server setting an interrupted run finished (the partial store)."""
    reused: dict[tuple[str, int], dict[str, Any]] = {}
    if job.store is not None:
        for w, i in planned:
            row = job.store.row(server_label, w, _label(job.workloads[w].points[i]))
            if row is not None:
                reused[(w, i)] = row
    return reused


@dataclass
class _Grid:
    """The grid mode's points on one running server: each planned point measured, reused from an
    interrupted run, or skipped by the race (it cannot reach the leader)."""

    job: PairJob
    runner: _PointRunner
    server_label: str
    common: dict[str, Any]
    mismatch: str | None
    earlier: Sequence[dict[str, Any]]
    max_batch: int | None

    def run(
        self,
        planned: list[tuple[str, int]],
        reused: dict[tuple[str, int], dict[str, Any]],
        done: list[dict[str, Any]],
        raced: dict[str, RaceDrop],
    ) -> None:
        races: dict[str, _Race | None] = {}
        for w, i in planned:
            point = self.job.workloads[w].points[i]
            if (w, i) in reused:
                done.append(reused[(w, i)])
                continue
            if w not in races:
                races[w] = _race(self.job, w, self.earlier, self.max_batch)
            bound = _skip_in_race(races[w], point, done)
            if bound is not None:
                self._skip(races[w], w, point, bound, raced)
                continue
            floor = _race_floor(self.job, w, [*self.earlier, *done])
            row = self._measure(w, i, point, floor)
            done.append(row)
            if floor is not None and RACE_STOP in (row.get("stop_reason") or ""):
                self._stopped(floor, w, point, row, raced)

    def _stopped(
        self, floor: RaceFloor, w: str, point: Any, row: dict[str, Any], raced: dict[str, RaceDrop]
    ) -> None:
        """Record a point the race stopped part-way: its row's interval bounds what it could
        have delivered (the tuned-against-default figure allows for it), or, where a closed
        loop stopped on its streams' ceiling before its interval could show it, that ceiling."""
        high = metric_bounds(row, floor.metric)[1] if row.get(floor.metric) is not None else 0.0
        if isinstance(point, ClosedLoop) and ON_CEILING in str(row.get("stop_reason")):
            # the ceiling from its repeats' records, at the look's level (as the stop was shown)
            records = [
                r
                for repeat in range(self.job.bench.repeats)
                if (path := self.runner.server_dir / w / _label(point) / f"r{repeat}"
                    / "records.jsonl").is_file()
                for r in read_records(path)
            ]  # fmt: skip
            cap = ceiling(records, point.concurrency, floor.one_sided)
            if cap is not None:
                high = min(high, cap)
        drop = raced.get(w) or RaceDrop(
            reason=row["stop_reason"], leader=floor.leader, metric=floor.metric,
            floor=floor.floor, bound=high, skipped=[],
        )  # fmt: skip
        raced[w] = drop.model_copy(
            update={"bound": max(drop.bound, high), "stopped": [*drop.stopped, _label(point)]}
        )
        log.info("%s %s: %s %s stopped by the race: %s", self.job.name, self.server_label, w,
                 _label(point), row["stop_reason"])  # fmt: skip

    def _skip(
        self, race: _Race | None, w: str, point: Any, bound: float, raced: dict[str, RaceDrop]
    ) -> None:
        assert race is not None
        drop = raced.get(w) or RaceDrop(
            reason=race.reason(bound),
            leader=f"{race.leader['server_point']} @ {race.leader['load_point']}",
            metric=race.metric,
            floor=race.floor,
            bound=bound,
            skipped=[],
        )
        drop.skipped.append(_label(point))
        raced[w] = drop
        log.info("%s %s: %s %s not run: %s", self.job.name, self.server_label, w,
                 _label(point), drop.reason)  # fmt: skip

    def _measure(self, w: str, i: int, point: Any, race: RaceFloor | None = None) -> dict[str, Any]:
        job = self.job
        try:
            row = self.runner.run(w, job.workloads[w], i, race)
        except RuntimeError as exc:  # a load process failed: lose this point only
            log.error("%s %s %s: %s", job.name, w, _label(point), exc)
            row = failed_row(f"load generator failed: {exc}", w)
            row.update(load_point=_label(point), shape=point.model_dump(mode="json"))
        row = checks({**self.common, **row}, served_mismatch=self.mismatch)
        if job.store is not None:
            job.store.save_row(self.server_label, w, _label(point), row)
        return row


def _lost_rows(
    job: PairJob,
    planned: list[tuple[str, int]],
    done: list[dict[str, Any]],
    raced: dict[str, RaceDrop],
    error: str | None,
    common: dict[str, Any],
) -> list[dict[str, Any]]:
    """A failed row for each planned point neither measured nor raced away (what a server's
    failure took), and for each search the failure cut short."""
    finished = {(r["workload"], r["load_point"]) for r in done}
    finished |= {(w, label) for w, drop in raced.items() for label in drop.skipped}
    lost = []
    for w, i in planned:
        point = job.workloads[w].points[i]
        if (w, _label(point)) not in finished:
            row = failed_row(error or "not run", w)
            row.update(**common, load_point=_label(point), shape=point.model_dump(mode="json"))
            lost.append(checks(row))
    if error is not None and job.bench.mode == "search":
        for w in job.workloads:
            row = failed_row(error, w)
            row.update(**common, load_point="search", shape=None)
            lost.append(checks(row))
    return lost


def _run_server_point(
    job: PairJob,
    server_label: str,
    settings: EngineSettings,
    out_dir: Path,
    earlier: Sequence[dict[str, Any]] = (),
    task: TaskJob | None = None,
    task_flag: str | None = None,
    probe: ProbeSettings | None = None,
) -> _ServerRun:
    """One server setting, its points measured or reused.
    ``earlier``: the rows of the settings run before it (the leader a search races);
    ``task``: score the pair's served task on this server; ``task_flag``: the flag an earlier
    server's task verdict gives every row of the pair; ``probe``: probe this server for the
    estimate before its points."""
    store = job.store
    planned = _planned(job)
    common = {"server_point": server_label, "settings": _changed(settings, job.settings)}
    reused = _reused_rows(job, server_label, planned)
    old_server = store.server(server_label) if store is not None else None
    if planned and len(reused) == len(planned) and old_server is not None:
        log.info("%s %s: every point finished earlier; reusing them", job.name, server_label)
        return _ServerRun(
            list(reused.values()), ServerPoint.model_validate(old_server), len(reused)
        )
    server_dir = store.server_dir(server_label) if store is not None else out_dir / server_label

    def relaunch() -> LaunchSpec:
        return job.engine.launch(job.artifact, settings, job.bench.host, free_port(job.bench.host))

    launch = relaunch()
    common.update(command=launch.redacted_argv(), env=launch.redacted_env())
    server = Server(launch, server_dir / "server.log", relaunch=relaunch)
    done: list[dict[str, Any]] = []
    searches: dict[str, SearchInfo] = {}
    raced: dict[str, RaceDrop] = {}
    max_batch = job.engine.max_batch(settings)
    error: str | None = None
    check = ServedCheck(verdict="not checked", note="the server did not start")
    scored: ServedTask | None = None
    probed: PairCalibration | None = None
    try:
        with server:
            # the launch the server runs (another port's, where the first one was lost)
            common.update(command=server.spec.redacted_argv(), env=server.spec.redacted_env())
            server.warmup(timeout_s=min(s.timeout_s for s in job.workloads.values()))
            if probe is not None:  # first, on the fresh server: nothing cached but its warm-up
                probed = probe_on(job.name, job.artifact.name, job.engine, server, server_label,
                                  settings, probe)  # fmt: skip
                if store is not None:
                    store.save_probe(probed)
            check = served_check(server, job.references)
            if task is not None:
                scored = score_on(server, server_label, task)
                if store is not None:
                    store.save_task(scored.model_dump(mode="json"))
            runner = _PointRunner(job, server, server_label, server_dir)
            runner.server_settings = settings
            flags = [
                f"{check.mismatched} of {check.decided} certain answers differ"
                if check.verdict == "mismatch"
                else None,
                task_mismatch(scored) or task_flag,
            ]
            mismatch = "; ".join(f for f in flags if f) or None
            if job.bench.mode == "grid":
                grid = _Grid(job, runner, server_label, common, mismatch, earlier, max_batch)
                grid.run(planned, reused, done, raced)
            else:

                def keep(row: dict[str, Any]) -> dict[str, Any]:
                    row = checks({**common, **row}, served_mismatch=mismatch)
                    done.append(row)
                    return row

                for w in job.workloads:
                    race = _race(job, w, earlier, max_batch)
                    searches[w] = _run_search(job, runner, w, keep, _give_up(race, done))
    except (ServerError, PortInUseError) as exc:
        error = str(exc)
        log.error("%s %s: %s", job.name, server_label, error.splitlines()[0])
    done.extend(_lost_rows(job, planned, done, raced, error, common))
    report = server.report() if server.process is not None else _no_server(launch)
    info = ServerPoint(
        server_point=server_label,
        settings=common["settings"],
        command=common["command"],
        env=common["env"],
        report=ServerReport.model_validate(report),
        error=error,
        search=searches,
        served_check=check,
        is_default=not common["settings"],
        off_engine_defaults=settings.off_engine_defaults(),
        raced=raced,
    )
    if store is not None and error is None:
        store.save_server(server_label, info.model_dump(mode="json"))
    if probe is not None and probed is None:  # the server did not start
        probed = not_probed(job.name, job.artifact.name, job.engine, server_label, settings,
                            common["command"], error=error or "the server did not start")  # fmt: skip
    return _ServerRun(done, info, len(reused), scored, probed)


def _no_server(launch: Any) -> dict[str, Any]:
    return {
        "engine": launch.engine, "argv": launch.redacted_argv(), "env": launch.redacted_env(),
        "url": launch.base_url, "ready_seconds": None, "peak_rss_bytes": None,
        "peak_gpu_bytes": None, "memory_samples": 0, "exit": None, "log": "",
    }  # fmt: skip


def run_pair(job: PairJob, out_dir: Path) -> PairSummary:
    """Run the whole pair into out_dir and return its summary (written by the caller).

    Rows are computed as dicts (decision.rows) and validated into the summary's schema here,
    so a row that drifts from :class:`~quantbench.schemas.bench.BenchRow` fails the stage."""
    server_points = [] if job.not_served else job.settings.sweep_points()
    if job.screened is not None and len(server_points) > 1:
        # the setting the probe needs (the one that batches most): one server start in all
        server_points = [probe_point(job.engine, job.settings)]
        log.info("%s: one server setting (%s), points at their floor: %s", job.name,
                 server_points[0][0], job.screened)  # fmt: skip
    rows: list[dict[str, Any]] = []
    servers: list[ServerPoint] = []
    started = time.time()
    resumed = 0
    task: ServedTask | None = None
    if job.task is not None and job.store is not None and (old := job.store.task()) is not None:
        task = ServedTask.model_validate(old)  # scored by the interrupted run: kept
    if job.task is not None and job.screened is not None and task is None:
        # its variant can never be recommended, whatever its server answers: the task's minute
        # goes to the pairs that can win, as the points' time does (the served check still
        # holds the server to the variant's certain answers)
        task = ServedTask(
            verdict="not scored", server_point=None,
            note=f"not asked: the pair is screened ({job.screened})",
        )  # fmt: skip
    probed = job.store.probe(job.name) if job.probe and job.store is not None else None
    probe_at = probe_point(job.engine, job.settings) if job.probe and server_points else None
    probe_label = probe_at[0] if probe_at is not None else None
    with load_processes():  # every point of the pair forked from one template load process
        for server_label, settings in server_points:
            ran = _run_server_point(
                job, server_label, settings, out_dir, rows,
                task=job.task if task is None else None, task_flag=task_mismatch(task),
                probe=job.probe if probed is None and server_label == probe_label else None,
            )  # fmt: skip
            rows += ran.rows
            servers.append(ran.info)
            resumed += ran.reused
            task = task or ran.task
            probed = probed or ran.probe
    if job.task is not None and task is None:
        task = ServedTask(
            verdict="not scored", server_point=None,
            note=job.not_served or "no server of the pair ran (each failed, or every point was "
            "resumed)",
        )  # fmt: skip
    peak = {s.server_point: s.report.memory_bytes for s in servers}  # GPU + host
    best: dict[str, BenchRow | None] = {}
    ties: dict[str, list[str]] = {}
    decided: dict[str, str] = {}
    rank_goodput = False
    for w in job.workloads:
        by_goodput = _ranked_by_goodput(job, w)
        rank_goodput = rank_goodput or by_goodput
        mine = [r for r in rows if r["workload"] == w]
        winner, tied, rule = pick_best(mine, by_goodput, lambda r: peak.get(r["server_point"]))
        best[w] = BenchRow.model_validate(winner) if winner is not None else None
        ties[w] = [f"{r['server_point']}/{r['workload']}/{r['load_point']}" for r in tied]
        decided[w] = rule
    if job.store is not None:
        job.store.copy_into(out_dir)
    if probe_at is not None:  # the estimate's input (quantbench.estimate.calibrate)
        if probed is None:  # its setting's points were all resumed, its server not started
            label, point = probe_at
            probed = not_probed(job.name, job.artifact.name, job.engine, label, point, [],
                                skipped="every point of the probed setting was resumed from an "
                                "interrupted run; its server was not started again")  # fmt: skip
        schema_io.write(out_dir / PairCalibration.FILE, probed)
    return PairSummary(
        pair=job.name,
        variant=job.artifact.name,
        format=job.artifact.format,
        engine=job.engine.name,
        engine_version=_safe_version(job),
        mode=job.bench.mode,
        slo=job.slo,
        ranked_by=rank_metric(rank_goodput),  # type: ignore[arg-type]
        workloads=list(job.workloads),
        slos={w: job.slo_for(w) for w in job.workloads},
        price_per_hour=job.bench.price_per_hour,
        currency=job.bench.currency,
        host=job.bench.host,
        server_points=len(server_points),
        rows=[BenchRow.model_validate(row) for row in rows],
        servers=servers,
        best=best,
        ties=ties,
        decided_by=decided,
        resumed_points=resumed,
        task=task,
        not_served=job.not_served,
        screened=job.screened,
        wall_seconds=round(time.time() - started, 1),
    )


def _safe_version(job: PairJob) -> str:
    try:
        return job.engine.version(job.settings)
    except Exception as exc:  # a version string must never fail a finished benchmark
        return f"unknown ({type(exc).__name__})"
