"""A load session: one workload against one server, point by point (plan, load process, summary).

This is the parent side of the harness; it never imports Locust. Per point it writes a plan, runs
``python -m quantbench.load.runner`` (or a master and N workers, see
:mod:`quantbench.load.distributed`), reads the records back, completes token counts with the
tokenizer, and computes the point's metrics. Outputs, in ``out_dir``:

* ``records.jsonl``: one line per request of every point (warm-up included, flagged);
* ``summary.json``: a :class:`~quantbench.schemas.session.SessionSummary` (on a machine with a
  GPU, each point with its GPUs' counters over its window: :mod:`quantbench.load.gpu_window`);
* ``load_meta.json``: per point, what the load process knew beyond its records (why it stopped,
  its own event-loop lag and CPU time).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from quantbench import slo as slo_mod
from quantbench.accelerator.telemetry import Telemetry
from quantbench.load.distributed import run_distributed
from quantbench.load.forkserver import load_processes, start_local
from quantbench.load.gpu_window import GpuSampler
from quantbench.load.metrics import PointResult, summarize
from quantbench.load.procs import stop_group
from quantbench.load.profiles import get_profile
from quantbench.load.records import RequestRecord, read_records
from quantbench.load.requests import body_rules, check_fixed_length, endpoint_path
from quantbench.load.tokens import TokenCounter, fill_token_counts, load_counter
from quantbench.schemas import io as schema_io
from quantbench.schemas.session import SessionSummary
from quantbench.workloads.plan import LoadPlan, Precision, RaceFloor
from quantbench.workloads.spec import ClosedLoop, PrecisionSpec, WorkloadSpec
from quantbench.workloads.traffic import Traffic, materialize, shuffled

# Exit codes of a process stopped by SIGINT or SIGTERM (by the signal, or by a handler's exit).
INTERRUPTED_CODES = frozenset({-signal.SIGINT, -signal.SIGTERM, 130, 143})

# An uncapped open loop still needs Locust users to send with: this many at most.
OPEN_LOOP_SLOTS = 1024
LOAD_META = "load_meta.json"
# What named workloads cut their prompts from when no params file says (quantbench load).
DEFAULT_CORPUS = (Path("data/calibration.txt"), Path("data/eval.txt"))


class Target(BaseModel):
    """The server a workload runs against."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="Base URL of the OpenAI-compatible server (with or without /v1).")
    engine: str = Field(default="openai", description="Engine profile for optional fields.")
    model: str | None = Field(
        default=None, description="'model' field of requests; default: the server's first model."
    )
    tokenizer: str | None = Field(
        default=None, description="Local tokenizer (file or model dir) for counts without usage."
    )
    headers: dict[str, str] = Field(
        default_factory=dict, repr=False, description="Extra HTTP headers (never written out)."
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="Sent as 'Authorization: Bearer KEY'; never written to records, summaries "
        "or logs.",
    )

    def request_headers(self) -> dict[str, str]:
        """The headers every request carries: the extra ones, then the API key's."""
        headers = dict(self.headers)
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return headers


def normalize_url(url: str) -> str:
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"server URL must start with http:// or https://, got {url!r}")
    return url


def first_model(url: str, headers: dict[str, str], timeout_s: float = 10.0) -> str:
    req = urllib.request.Request(f"{url}/v1/models", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data = json.load(resp)
        return str(data["data"][0]["id"])
    except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError) as e:
        raise RuntimeError(
            f"could not ask {url}/v1/models which model it serves ({e}); is the server up? "
            "Or name the model with --model"
        ) from None


def build_traffic(
    spec: WorkloadSpec,
    counter: TokenCounter | None,
    corpus: Sequence[Path] = DEFAULT_CORPUS,
    context: int | None = None,
) -> Traffic:
    """The workload's traffic, built here (``quantbench load`` against any server; the bench
    stages read what the workloads stage wrote instead)."""
    return materialize(
        spec,
        corpus,
        count=counter.count_text if counter is not None else None,
        cut=counter.cut if counter is not None else None,
        context=context,
    )


def _precision(
    spec: PrecisionSpec, constraints: Sequence[slo_mod.Constraint], confidence: float
) -> Precision:
    """How a precision-sized point stops: at its targets, at least the sample its SLO verdict
    needs for power (a p90 needs 61 requests for 80 % at 95 %), at most its cap, early on a fail
    beyond noise, and (``early_pass``) at a first look on a pass shown at the design's level."""
    design = slo_mod.early_pass(constraints, confidence) if spec.early_pass else None
    check_every = Precision.check_every
    first = None
    if design is not None:
        first = max(spec.min_requests, -(-design.first_look // check_every) * check_every)
    verdict = design.confidence if design is not None else confidence
    needed, _ = slo_mod.requests_needed(constraints, verdict, spec.power)
    floor = min(max(spec.min_requests, needed), spec.max_requests)
    if first is not None and first >= floor:
        design, first, verdict = None, None, confidence  # no look before the cap: one look
        needed, _ = slo_mod.requests_needed(constraints, confidence, spec.power)
        floor = min(max(spec.min_requests, needed), spec.max_requests)
    return Precision(
        targets=spec.parsed(),
        rel_half_width=spec.rel_half_width,
        confidence=spec.confidence,
        min_measured=floor,
        max_measured=spec.max_requests,
        fail_limits=slo_mod.fail_limits(constraints),
        first_look=first,
        fail_confidence=Precision.fail_level(spec.confidence, spec.max_requests),
        verdict_confidence=verdict if design is not None else None,
        pass_limits=design.limits if design is not None else [],
        error_limit=design.error_limit if design is not None else None,
    )


def verdict_level(
    spec: PrecisionSpec | None, constraints: Sequence[slo_mod.Constraint], confidence: float
) -> float | None:
    """The one-sided level a point's SLO verdict was judged at where it is not ``confidence``
    (the early-pass design's); None otherwise."""
    return None if spec is None else _precision(spec, constraints, confidence).verdict_confidence


def early_pass_look(
    spec: PrecisionSpec, constraints: Sequence[slo_mod.Constraint], confidence: float
) -> int | None:
    """The first look of a precision-sized point's early-pass design (None: one look)."""
    return _precision(spec, constraints, confidence).first_look


def plan_point(
    spec: WorkloadSpec,
    index: int,
    traffic: Traffic,
    *,
    url: str,
    model: str,
    engine: str,
    headers: dict[str, str],
    repeat: int = 0,
    constraints: Sequence[slo_mod.Constraint] = (),
    confidence: float = 0.95,
    race: RaceFloor | None = None,
) -> LoadPlan:
    """The load plan of point ``index`` (repeat ``repeat``): conversations, phases, limits.

    Every point and every repeat gets its own conversation order and arrival times (seeded from
    the workload's seed, the point and the repeat), so no run replays another's prompts on the
    same schedule: repeats measure the server's variation, not one sample's.
    """
    point = spec.points[index]
    label = spec.point_label(index)
    n, duration = spec.point_size(index)
    profile = get_profile(engine)
    rules = body_rules(
        model=model,
        profile=profile,
        fixed_output_length=spec.fixed_output_length,
        request_fields=dict(spec.request_fields),
    )
    seed = f"{spec.seed}/{label}/{repeat}"
    conversations = shuffled(traffic, seed)
    precision = None
    if spec.precision is not None:
        precision = replace(_precision(spec.precision, constraints, confidence), race=race)
    warmup = spec.warmup_for(point)
    if isinstance(point, ClosedLoop):
        mode, users, rate, burst, ramp = "closed", point.concurrency, None, 1.0, 0.0
    else:
        mode, rate, burst, ramp = "open", point.rate, point.burstiness, point.ramp_s
        users = point.max_concurrency or OPEN_LOOP_SLOTS
    if spec.workers:
        users = max(users, spec.workers)
    return LoadPlan(
        url=url,
        path=endpoint_path(spec.api),
        api=spec.api,
        point=label,
        mode=mode,  # type: ignore[arg-type]
        users=users,
        conversations=conversations,
        rules=rules,
        warmup_conversations=warmup,
        warmup_s=spec.warmup_s,
        measured_conversations=n,
        duration_s=duration,
        precision=precision,
        rate=rate,
        burstiness=burst,
        ramp_s=ramp,
        schedule=traffic.schedule if mode == "open" and traffic.schedule is not None else None,
        arrival_seed=zlib.crc32(seed.encode()),
        timeout_s=spec.timeout_s,
        request_timeout_s=spec.request_timeout_s,
        point_timeout_s=spec.point_timeout_s,
        headers=headers,
        progress_interval_s=spec.progress_interval_s,
        id_prefix=f"{label}-r{repeat}-",
        unique_prompts=spec.unique_prompts,
    )


def run_plan(
    plan: LoadPlan, records_path: Path, workers: int, workdir: Path
) -> list[RequestRecord]:
    """Run one plan in a load process (or master + workers) and return its records."""
    plan_path = workdir / f"plan-{plan.point}.json"
    plan.save(plan_path)
    if workers:
        rc = run_distributed(plan_path, records_path, workers)
    else:
        # forked from this scope's template where there is one (load_processes): the same
        # process a fresh start is, without Locust's import at every point
        proc = start_local(["local", "--plan", str(plan_path), "--records", str(records_path)])
        try:
            rc = proc.wait()
        finally:
            stop_group(proc)
    if rc in INTERRUPTED_CODES:
        # The load process was interrupted with us (Ctrl-C or SIGTERM reached the whole process
        # group): that is the run being stopped, not one point failing, so stop here too.
        raise KeyboardInterrupt(f"load process for point {plan.point} was interrupted ({rc})")
    if rc != 0:
        raise RuntimeError(f"load process for point {plan.point} exited with code {rc}")
    return read_records(records_path)


def read_meta(records_path: Path) -> dict[str, Any]:
    path = records_path.with_name(records_path.name + ".meta.json")
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def run_session(
    spec: WorkloadSpec,
    target: Target,
    out_dir: Path,
    *,
    slo: slo_mod.Slo | None = None,
    traffic: Traffic | None = None,
    confidence: float = 0.95,
    repeat: int = 0,
    points: Sequence[int] | None = None,
    race: RaceFloor | None = None,
) -> SessionSummary:
    """Run the workload's points (all, or those of ``points``) against the target.
    ``race``: stop a precision-sized point once it cannot reach this leader (bench.race)."""
    constraints = list(slo.constraints) if slo is not None else []
    # what the server cannot be asked is refused once, here, before any request or output
    check_fixed_length(get_profile(target.engine), spec.fixed_output_length, spec.request_fields)
    url = normalize_url(target.url)
    headers = target.request_headers()
    model = target.model or first_model(url, headers)
    counter = load_counter(target.tokenizer) if target.tokenizer else None
    if traffic is None:
        traffic = build_traffic(spec, counter)
    for note in traffic.notes:  # where a prompt misses the length asked, and by how much
        print(f"prompt lengths: {note}", file=sys.stderr, flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[PointResult] = []
    metas: dict[str, dict[str, Any]] = {}
    indices = list(points) if points is not None else list(range(len(spec.points)))
    wall_offset = time.time() - time.monotonic()
    telemetry = Telemetry()  # inert without a GPU: no sampler thread, no point's `gpu`
    with (
        contextlib.closing(telemetry),
        load_processes(),
        tempfile.TemporaryDirectory(prefix="qb-load-") as tmp,
        (out_dir / "records.jsonl").open("w", encoding="utf-8") as all_records,
    ):
        for k, i in enumerate(indices):
            plan = plan_point(
                spec, i, traffic, url=url, model=model, engine=target.engine, headers=headers,
                repeat=repeat, constraints=constraints, confidence=confidence, race=race,
            )  # fmt: skip
            print(
                f"point {k + 1}/{len(indices)}: {plan.point} ({plan.mode} loop, "
                f"{plan.users} users)",
                file=sys.stderr,
                flush=True,
            )
            raw = Path(tmp) / f"raw-{i}.jsonl"
            # the GPUs sampled while the load process runs; its window is kept once known
            with GpuSampler(telemetry) as gpu:
                records = run_plan(plan, raw, spec.workers, Path(tmp))
            records.sort(key=lambda r: (r.index, r.turn))
            fill_token_counts(records, counter, {}, spec.api)
            if not spec.keep_text:
                for rec in records:
                    rec.output_text = None
            for rec in records:
                all_records.write(rec.to_json() + "\n")
            meta = read_meta(raw)
            metas[plan.point] = meta
            shape = spec.points[i].model_dump(mode="json")
            if traffic.schedule is not None:
                shape["schedule"] = "trace"
            result = summarize(
                records,
                point=plan.point,
                scenario=spec.name,
                shape=shape,
                percentiles=spec.percentiles,
                constraints=constraints,
                confidence=confidence,
                verdict_confidence=(
                    plan.precision.verdict_confidence if plan.precision is not None else None
                ),
                fixed_output_length=spec.fixed_output_length,
                meta=meta,
                wall_offset=wall_offset,
            )
            result.gpu = gpu.over(result.window.start, result.window.end)
            results.append(result)
    summary = SessionSummary(
        url=url,
        engine=target.engine,
        model=model,
        workload=spec.model_dump(mode="json"),
        slo=slo,
        created_at=time.time(),
        points=results,
        workload_summary=traffic.summary,
    )
    schema_io.write(out_dir / "summary.json", summary)
    # what the load process knew beyond its records (stop reason, its own loop lag and CPU), per
    # point: re-judging the records later (the report) needs it for the harness check
    (out_dir / LOAD_META).write_text(json.dumps(metas, indent=1, sort_keys=True), encoding="utf-8")
    return summary
