"""Running one benchmark pair (`bench.run.run_pair`) on the stand-in engine, and reading it back.

A scenario's pair sweeps `faulty: [true, false]`: the first server point carries the fault, the
second is healthy and must be measured in full, which shows the run went on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults.engine import Fault, Launch, StandinEngine, StandinSettings
from faults.scenario import Context
from quantbench.bench.job import workloads_job
from quantbench.bench.run import PairJob, run_pair
from quantbench.bench.spec import BenchSettings
from quantbench.engines.artifact import Artifact
from quantbench.load.records import RequestRecord, read_records
from quantbench.mock_server import Behaviour
from quantbench.schemas import io as schema_io
from quantbench.slo import Slo
from quantbench.workloads.spec import WorkloadSpec

# A per-request limit (every answer within 5 s): decided from any sample size, a failed request
# counting as infinitely late.
SLO = Slo("e2e<=5s")


def job_for(
    engine: Any, artifact: Artifact, settings: Any, spec: WorkloadSpec, bench: BenchSettings
) -> PairJob:
    """A pair job running one workload (its traffic built here, as the workloads stage would)."""
    return workloads_job("tiny-fake", artifact, engine, settings, {spec.name: spec}, SLO, bench)


def workload(**update: Any) -> WorkloadSpec:
    """Two small closed-loop points: 4 requests one at a time, then 6 two at a time."""
    data: dict[str, Any] = {
        "name": "faults",
        "prompts": {"source": "random", "input_len": 8, "output_len": 8, "num_prompts": 4},
        "load": [
            {"kind": "concurrency", "concurrency": 1, "num_requests": 4},
            {"kind": "concurrency", "concurrency": 2, "num_requests": 6},
        ],
        "fixed_output_length": True,
        "warmup_requests": 0,  # the server's own warm-up request comes first
        "timeout_s": 5,
        "progress_interval_s": 60,
    }
    data.update(update)
    return WorkloadSpec.model_validate(data)


@dataclass
class PairRun:
    summary: dict[str, Any]  # the pair's summary.json as written (PairSummary, dumped)
    out: Path
    engine: StandinEngine
    injector_note: list[str] = field(default_factory=list)

    def rows(self, faulty: bool) -> list[dict[str, Any]]:
        label = "faulty=on" if faulty else "faulty=off"
        return [r for r in self.summary["rows"] if r["server_point"] == label]

    def server(self, faulty: bool) -> dict[str, Any]:
        label = "faulty=on" if faulty else "faulty=off"
        return next(s for s in self.summary["servers"] if s["server_point"] == label)

    def records(
        self, faulty: bool | None = None, phases: tuple[str, ...] = ("measured",)
    ) -> list[RequestRecord]:
        """The request records the run wrote (of one server point, or all), of the given phases
        (measured only by default: warm-up and cool-down requests are not the point's sample)."""
        points = (
            ["faulty=on", "faulty=off"]
            if faulty is None
            else ["faulty=on" if faulty else "faulty=off"]
        )
        records: list[RequestRecord] = []
        for point in points:
            for path in sorted((self.out / point).glob("*/*/r*/records.jsonl")):
                records.extend(r for r in read_records(path) if r.phase in phases)
        return records

    def launch(self, faulty: bool) -> Launch:
        return next(x for x in self.engine.launches if x.faulty == faulty)

    def lost(self) -> int:
        """Requests a server answered in full (healthy behaviour, per its truth log) that the
        outputs do not hold as completed, plus server points with no rows at all."""
        lost = 0
        for faulty in (True, False):
            every = self.records(faulty, phases=("warmup", "measured", "cooldown"))
            completed = {r.request_id for r in every if r.status == "completed"}
            launch = next((x for x in self.engine.launches if x.faulty == faulty), None)
            if launch is None or not launch.truth_log.is_file():
                continue
            for line in launch.truth_log.read_text(encoding="utf-8").splitlines():
                entry = json.loads(line)
                rid = entry.get("request_id")
                answered = entry.get("outcome") == "completed" and entry.get("behaviour") == "ok"
                if rid is not None and answered and rid not in completed:
                    lost += 1
        for faulty in (True, False):
            if not self.rows(faulty):
                lost += 1
        return lost


def run_standin_pair(
    ctx: Context,
    fault: Fault,
    *,
    spec: WorkloadSpec | None = None,
    bench: BenchSettings | None = None,
    settings: dict[str, Any] | None = None,
    healthy: tuple[Behaviour, ...] | None = None,
    inject: Callable[[StandinEngine, list[str]], None] | None = None,
) -> PairRun:
    """run_pair with a faulty then a healthy stand-in server; `inject` runs in a thread beside it
    (e.g. to kill the server at the right moment) and may leave notes."""
    engine = StandinEngine(ctx.dir / "engine", fault)
    if healthy is not None:
        engine.healthy = healthy
    job = job_for(
        engine,
        Artifact("tiny", "bf16", ctx.dir),
        StandinSettings(sweep={"faulty": [True, False]}, **(settings or {})),
        spec or workload(),
        bench or BenchSettings(),
    )
    out = ctx.dir / "out"
    notes: list[str] = []
    with ctx.tagged():
        thread = None
        if inject is not None:
            thread = threading.Thread(target=inject, args=(engine, notes), daemon=True)
            thread.start()
        summary = run_pair(job, out)
        if thread is not None:
            thread.join(timeout=5)
    schema_io.write(out / "summary.json", summary)
    return PairRun(summary.model_dump(mode="json"), out, engine, notes)


def failed_reasons(records: list[RequestRecord]) -> dict[str, int]:
    """Failure reasons of records, shortened to their first 50 characters, with counts."""
    reasons: dict[str, int] = {}
    for rec in records:
        if rec.status == "failed":
            key = (rec.error or "(no reason)")[:50]
            reasons[key] = reasons.get(key, 0) + 1
    return reasons
