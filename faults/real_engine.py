"""Faults against a real engine: llama-server on the embedded model, behind the scriptable proxy.

The stand-in scenarios (server_faults.py) show our logic with a scripted server; these show the
same outcomes with the engine users run: a real llama-server process tree, started and stopped by
the bench lifecycle, with broken streams injected between it and the load generator
(faults/proxy.py), killed mid-stream, or left running when the bench stage itself is SIGKILLed.
Each pair sweeps ``faulty: [true, false]``: the faulty server point breaks, the healthy one after
it must be measured in full.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psutil

from faults.engine import _importable
from faults.pairs import PairRun, failed_reasons, job_for, workload
from faults.scenario import TAG_VAR, Checks, Context, Outcome, Scenario
from faults.server_faults import _short, finish
from quantbench.bench.run import run_pair
from quantbench.bench.spec import BenchSettings
from quantbench.engines.artifact import Artifact, load_artifact
from quantbench.engines.base import Engine, EngineSettings, LaunchSpec
from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings
from quantbench.load.requests import RequestProfile
from quantbench.ports import free_port
from quantbench.schemas import io as schema_io


class ProxiedSettings(LlamaCppSettings):
    faulty: bool = False


@dataclass
class Proxied(Engine):
    """A real engine as quantbench launches it, behind faults.proxy with one fault when faulty
    (``settings.faulty``); :attr:`inner` is the engine, each subclass one of them."""

    workdir: Path
    fault: str = "none"
    launches: list[Any] = field(default_factory=list)  # PairRun.lost() reads truth logs: none
    engine_pids: list[Path] = field(default_factory=list)

    inner: ClassVar[type[Engine]]

    def proxy_fault(self, settings: Any) -> str:
        """The fault the proxy of a server started with ``settings`` injects."""
        return self.fault if settings.faulty else "none"

    def launch(self, artifact: Artifact, settings: Any, host: str, port: int) -> LaunchSpec:
        upstream = free_port(host)
        inner = self.inner().launch(artifact, settings, host, upstream)
        pidfile = self.workdir / f"engine-{len(self.engine_pids)}.pid"
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        self.engine_pids.append(pidfile)
        argv = [sys.executable, "-m", "faults.proxy", "--host", host, "--port", str(port)]
        argv += ["--upstream-port", str(upstream), "--pidfile", str(pidfile)]
        argv += ["--requests-log", str(pidfile.with_suffix(".requests"))]
        argv += ["--fault", self.proxy_fault(settings), "--", *inner.argv]
        return self.launch_spec(
            argv,
            settings,
            host,
            port,
            inner.model_name,
            env={**inner.env, "PYTHONPATH": _importable()},
        )

    def reset_prefix_cache(self, base_url: str, settings: Any) -> str:
        return self.inner().reset_prefix_cache(base_url, settings)

    def version(self, settings: Any) -> str:
        return f"{self.inner.name} behind faults.proxy"

    def chats_seen(self, index: int) -> int:
        """Chat requests the proxy of launch ``index`` has received so far."""
        try:
            path = self.engine_pids[index].with_suffix(".requests")
            return len(path.read_text(encoding="utf-8").splitlines())
        except (IndexError, OSError):
            return 0

    def engine_pid(self, index: int) -> int | None:
        try:
            return int(self.engine_pids[index].read_text(encoding="utf-8"))
        except (IndexError, OSError, ValueError):
            return None


@dataclass
class ProxiedLlamaCpp(Proxied):
    """llama-server behind faults.proxy."""

    name: ClassVar[str] = "llamacpp-proxied"
    formats: ClassVar[frozenset[str]] = frozenset({"gguf"})
    settings_model: ClassVar[type[EngineSettings]] = ProxiedSettings
    profile: ClassVar[RequestProfile] = LlamaCppEngine.profile
    inner: ClassVar[type[Engine]] = LlamaCppEngine


def embedded_artifact() -> Artifact:
    """The GGUF that ships with the embedded model (Q4_1): llama-server serves it as it is."""
    from quantbench.model import embedded_gguf_path

    return load_artifact(embedded_gguf_path(), "embedded-q4_1")


def real_workload() -> Any:
    """Two requests at a time, 4 of them; a request fails after 4 s without a byte or 6 s in all
    (a stream kept alive by comments costs that)."""
    return workload(
        load=[{"kind": "concurrency", "concurrency": 2, "num_requests": 4}],
        timeout_s=4,
        request_timeout_s=6,
    )


def run_real_pair(
    ctx: Context, fault: str, inject: Any = None, spec: Any = None
) -> tuple[PairRun, ProxiedLlamaCpp]:
    """run_pair with a faulty then a healthy proxied llama-server; ``inject(engine, out, notes)``
    runs in a thread beside it (to kill the engine at the right moment)."""
    import threading

    engine = ProxiedLlamaCpp(ctx.dir / "engine", fault)
    settings = ProxiedSettings(parallel=2, ctx_size=2048, sweep={"faulty": [True, False]})
    job = job_for(engine, embedded_artifact(), settings, spec or real_workload(), BenchSettings())
    out = ctx.dir / "out"
    notes: list[str] = []
    with ctx.tagged():
        thread = None
        if inject is not None:
            thread = threading.Thread(target=inject, args=(engine, out, notes), daemon=True)
            thread.start()
        summary = run_pair(job, out)
        if thread is not None:
            thread.join(timeout=5)
    schema_io.write(out / "summary.json", summary)
    run = PairRun(summary.model_dump(mode="json"), out, engine, notes)  # type: ignore[arg-type]
    return run, engine


EXPECTED_REASON = {
    "wrong-shape": "'delta' is a str",
    "keepalive": "",  # a deadline: the wording is the harness's, any reason will do
    "no-tokens": "empty stream",
    "cut": "cut short",
    "hang-after-headers": "",
}


def broken_stream(fault: str):  # type: ignore[no-untyped-def]
    def run(ctx: Context) -> Outcome:
        result, _ = run_real_pair(ctx, fault)
        chk = Checks()
        faulty = result.records(True)
        failed = [r for r in faulty if r.status != "completed"]
        chk.that(bool(faulty) and len(failed) == len(faulty), f"{len(failed)} of {len(faulty)} "
                 "requests through the broken stream failed")  # fmt: skip
        want = EXPECTED_REASON[fault]
        chk.that(
            all(want in (r.error or "") for r in failed),
            f"reasons {sorted({(r.error or '')[:60] for r in failed})} lack {want!r}",
        )
        reasons = failed_reasons(faulty) or {
            (r.error or "")[:50]: 1 for r in faulty if r.status != "completed"
        }
        return finish(
            chk,
            result,
            f"{len(failed)}/{len(faulty)} failed ('{_short(next(iter(reasons), '-'), 50)}')",
        )

    return run


def killed_mid_stream(ctx: Context) -> Outcome:
    """SIGKILL the real llama-server (behind a faithful proxy) while its answers stream."""

    def inject(engine: ProxiedLlamaCpp, out: Path, notes: list[str]) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pid = engine.engine_pid(0)
            # the warm-up and four measured requests sent: two of them are streaming now
            if pid is not None and engine.chats_seen(0) >= 5:
                time.sleep(0.3)
                os.kill(pid, signal.SIGKILL)
                notes.append(f"SIGKILL to llama-server (PID {pid}) mid-load")
                return
            time.sleep(0.02)

    # a slower answer (64 tokens) so the kill lands while requests stream
    spec = workload(
        prompts={"source": "random", "input_len": 8, "output_len": 64, "num_prompts": 4},
        load=[{"kind": "concurrency", "concurrency": 2, "num_requests": 8}],
        timeout_s=10,
    )
    result, _ = run_real_pair(ctx, "none", inject=inject, spec=spec)
    notes = result.injector_note
    chk = Checks()
    chk.that(bool(notes), "llama-server was never killed")
    faulty = result.records(True)
    failed = [r for r in faulty if r.status != "completed"]
    chk.that(bool(failed), "no request failed when the engine died under it")
    return finish(
        chk,
        result,
        f"{'; '.join(notes)}: {len(failed)} of {len(faulty)} measured requests failed "
        f"('{_short(failed[0].error if failed else '-', 50)}')",
    )


STAGE = """
import sys
from pathlib import Path
from faults.pairs import job_for
from faults.real_engine import ProxiedLlamaCpp, ProxiedSettings, embedded_artifact, workload
from quantbench.bench.run import run_pair
from quantbench.bench.spec import BenchSettings
work = Path(sys.argv[1])
spec = workload(
    prompts={"source": "random", "input_len": 8, "output_len": 256, "num_prompts": 4},
    load=[{"kind": "concurrency", "concurrency": 2, "num_requests": 40}], timeout_s=60,
)
settings = ProxiedSettings(parallel=2, ctx_size=2048)
job = job_for(ProxiedLlamaCpp(work / "engine"), embedded_artifact(), settings, spec,
              BenchSettings())
run_pair(job, work / "out")
"""


def stage_sigkilled(ctx: Context) -> Outcome:
    """A bench stage (its own process, as DVC runs it) SIGKILLed while a real llama-server
    answers its load: then a census of every process the run started."""
    return kill_stage_under_load(ctx, STAGE, "llama-server", start_timeout_s=120)


def kill_stage_under_load(ctx: Context, code: str, server: str, start_timeout_s: float) -> Outcome:
    """Run ``code`` (a bench stage on a proxied engine, writing under its argv[1]) as its own
    process; once the process named ``server`` (by :func:`_name`) answers its load, SIGKILL the
    stage and count what is still running after the guard's grace period."""
    env = {**os.environ, TAG_VAR: ctx.tag, "PYTHONPATH": _importable()}
    stage = subprocess.Popen(
        [sys.executable, "-c", code, str(ctx.dir)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(ctx.dir / "stage.log").open("w"),
    )
    chk = Checks()
    tree: set[int] = set()
    deadline = time.monotonic() + start_timeout_s
    loaded = False
    while time.monotonic() < deadline and stage.poll() is None:
        with_tag = _tagged(ctx.tag)
        tree |= with_tag
        names = {_name(p) for p in with_tag}
        requests = ctx.dir / "engine" / "engine-0.requests"
        sent = len(requests.read_text().splitlines()) if requests.is_file() else 0
        if server in names and sent >= 3:  # warm-up done, the load streaming
            loaded = True
            time.sleep(0.5)  # requests streaming, the load process busy
            tree |= _tagged(ctx.tag)
            break
        time.sleep(0.05)
    chk.that(loaded, "the stage never had its server under load")
    names = sorted({_name(p) for p in tree} - {""})
    stage.kill()  # SIGKILL: no handler of ours runs
    stage.wait(timeout=10)
    left: set[int] = set()
    end = time.monotonic() + 20  # the guard's grace period is 10 s
    while time.monotonic() < end:
        left = {p for p in tree if _running(p)}
        if not left:
            break
        time.sleep(0.1)
    chk.that(not left, f"left running after kill -9 of the stage: {sorted(_name(p) for p in left)}")
    return chk.outcome(
        f"stage SIGKILLed under load; {len(tree)} processes seen ({', '.join(names)}); "
        f"{len(left)} left after {min(20.0, 20 - (end - time.monotonic())):.1f} s",
        orphans=len(left),
    )


def _tagged(tag: str) -> set[int]:
    found = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(TAG_VAR) == tag:
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def _name(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        cmd = proc.cmdline()
        if any("faults.proxy" in c for c in cmd):
            return "faults.proxy"
        if any("quantbench.engines.guard" in c or c.endswith("engines/guard.py") for c in cmd):
            return "guard"
        if any("faults.pairs" in c for c in cmd):
            return "bench stage"
        if any("locust" in c or "quantbench.load" in c for c in cmd):
            return "load process"
        if any("vllm.entrypoints" in c for c in cmd):
            return "vllm api server"  # its engine core and worker name themselves VLLM::...
        return proc.name()
    except psutil.Error:
        return ""


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


SCENARIOS = [
    *[
        Scenario(
            f"real-{fault}",
            "server",
            f"real llama-server: {desc}",
            f"faults.proxy in front of llama-server ({fault}) on the faulty server point",
            f"every request through it fails with a reason ({want or 'its deadline'}); the "
            "healthy point measured in full; nothing left running",
            broken_stream(fault),
        )
        for fault, desc, want in (
            ("wrong-shape", "valid JSON of the wrong shape mid-stream", "'delta' is a str"),
            ("keepalive", "keep-alive comments forever", ""),
            ("no-tokens", "HTTP 200 with no token", "empty stream"),
            ("cut", "stream ends without [DONE] or a finish reason", "cut short"),
            ("hang-after-headers", "hangs after the headers", ""),
        )
    ],
    Scenario(
        "real-killed",
        "server",
        "real llama-server killed mid-stream",
        "SIGKILL to llama-server (behind a faithful proxy) once its answers stream",
        "the point's requests fail with a reason; the healthy point measured in full; nothing "
        "left running",
        killed_mid_stream,
    ),
    Scenario(
        "real-stage-kill9",
        "pipeline",
        "bench stage killed with kill -9 under load",
        "SIGKILL to a bench stage process while its real llama-server streams answers to its "
        "load process",
        "every process the stage started (guard, proxy, llama-server, load process) gone within "
        "the guard's grace period",
        stage_sigkilled,
    ),
]
