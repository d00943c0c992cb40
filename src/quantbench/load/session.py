"""A load session: one workload against one server, point by point (plan, load process, summary).

This is the parent side of the harness; it never imports Locust. Per point it writes a plan, runs
``python -m quantbench.load.runner`` (or a master and N workers, see
:mod:`quantbench.load.distributed`), reads the records back, completes token counts with the
tokenizer, and computes the point's metrics. Outputs, in ``out_dir``:

* ``records.jsonl``: one line per request of every point (warm-up included, flagged);
* ``summary.json``: a :class:`~quantbench.schemas.session.SessionSummary`.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from quantbench import slo as slo_mod
from quantbench.load import prompts as prompts_mod
from quantbench.load.arrivals import arrival_offsets
from quantbench.load.distributed import run_distributed
from quantbench.load.metrics import PointResult, summarize
from quantbench.load.plan import LoadPlan, PlannedRequest
from quantbench.load.procs import spawn_module, stop_group
from quantbench.load.records import RequestRecord, read_records
from quantbench.load.requests import build_body, endpoint_path, get_profile
from quantbench.load.spec import ClosedLoop, DatasetPrompts, WorkloadSpec
from quantbench.load.tokens import TokenCounter, fill_token_counts, load_counter
from quantbench.schemas import io as schema_io
from quantbench.schemas.session import SessionSummary

# Exit codes of a process stopped by SIGINT or SIGTERM (by the signal, or by a handler's exit).
INTERRUPTED_CODES = frozenset({-signal.SIGINT, -signal.SIGTERM, 130, 143})

# An uncapped open loop still needs Locust users to send with: this many at most.
OPEN_LOOP_SLOTS = 1024


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


def load_prompts(spec: WorkloadSpec, counter: TokenCounter | None) -> list[prompts_mod.PromptItem]:
    if isinstance(spec.prompts, DatasetPrompts):
        items = prompts_mod.load_dataset(spec.prompts)
        return prompts_mod.ordered(items, spec.seed, spec.prompts.shuffle)
    cut = counter.cut if counter is not None else None
    return prompts_mod.random_prompts(spec.prompts, spec.seed, cut)


def plan_point(
    spec: WorkloadSpec,
    index: int,
    items: Sequence[prompts_mod.PromptItem],
    *,
    url: str,
    model: str,
    engine: str,
    headers: dict[str, str],
) -> LoadPlan:
    """The load plan of point ``index``: bodies, arrival times, limits."""
    point = spec.load[index]
    label = spec.point_label(index)
    n, duration = spec.point_size(index)
    profile = get_profile(engine)
    requests = [
        PlannedRequest(
            prompt_id=item.id,
            scenario=item.scenario or spec.name,
            body=build_body(
                item,
                api=spec.api,
                model=model,
                profile=profile,
                fixed_output_length=spec.fixed_output_length,
                request_fields=dict(spec.request_fields),
            ),
        )
        for item in items
    ]
    total = None if n is None else n + spec.warmup_requests
    arrivals = None
    if isinstance(point, ClosedLoop):
        mode, users = "closed", point.concurrency
    else:
        mode = "open"
        until = None if duration is None else spec.warmup_s + duration
        # A seed per point, so the points of a sweep do not share one arrival pattern.
        arrivals = arrival_offsets(
            point.rate, point.burstiness, spec.seed + 7919 * index, count=total, until_s=until
        )
        users = point.max_concurrency or min(OPEN_LOOP_SLOTS, len(arrivals))
    if spec.workers:
        users = max(users, spec.workers)
    return LoadPlan(
        url=url,
        path=endpoint_path(spec.api),
        api=spec.api,
        point=label,
        mode=mode,
        users=users,
        requests=requests,
        total=total,
        arrivals=arrivals,
        warmup_requests=spec.warmup_requests,
        warmup_s=spec.warmup_s,
        duration_s=duration,
        timeout_s=spec.timeout_s,
        headers=headers,
        progress_interval_s=spec.progress_interval_s,
        id_prefix=f"{label}-",
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
        proc = spawn_module(
            "quantbench.load.runner",
            ["local", "--plan", str(plan_path), "--records", str(records_path)],
        )
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


def run_session(
    spec: WorkloadSpec,
    target: Target,
    out_dir: Path,
    *,
    slo: str | None = None,
) -> SessionSummary:
    constraints = slo_mod.parse_slo(slo) if slo else []
    url = normalize_url(target.url)
    headers = target.request_headers()
    model = target.model or first_model(url, headers)
    counter = load_counter(target.tokenizer) if target.tokenizer else None
    items = load_prompts(spec, counter)
    by_id = {item.id: item for item in items}
    out_dir.mkdir(parents=True, exist_ok=True)
    points: list[PointResult] = []
    with (
        tempfile.TemporaryDirectory(prefix="qb-load-") as tmp,
        (out_dir / "records.jsonl").open("w", encoding="utf-8") as all_records,
    ):
        for i in range(len(spec.load)):
            plan = plan_point(
                spec, i, items, url=url, model=model, engine=target.engine, headers=headers
            )
            print(
                f"point {i + 1}/{len(spec.load)}: {plan.point} ({plan.mode} loop, "
                f"{plan.users} users)",
                file=sys.stderr,
                flush=True,
            )
            records = run_plan(plan, Path(tmp) / f"raw-{i}.jsonl", spec.workers, Path(tmp))
            records.sort(key=lambda r: r.index)
            fill_token_counts(records, counter, by_id, spec.api)
            if not spec.keep_text:
                for rec in records:
                    rec.output_text = None
            for rec in records:
                all_records.write(rec.to_json() + "\n")
            points.append(
                summarize(
                    records,
                    point=plan.point,
                    scenario=spec.name,
                    shape=spec.load[i].model_dump(),
                    percentiles=spec.percentiles,
                    constraints=constraints,
                )
            )
    summary = SessionSummary(
        url=url,
        engine=target.engine,
        model=model,
        workload=spec.model_dump(mode="json"),
        slo=slo,
        created_at=time.time(),
        points=points,
    )
    schema_io.write(out_dir / "summary.json", summary)
    return summary
