"""A stand-in engine for `run_pair`: launches `faults.standin` with a chosen fault.

Its one sweepable setting, `faulty`, switches the fault on or off, so a scenario's sweep
`{faulty: [true, false]}` runs a faulty server point and then a healthy one: the second shows
that the rest of the benchmark went on.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineSettings, LaunchSpec
from quantbench.load.requests import RequestProfile
from quantbench.mock_server import PROFILE, Behaviour, Script

# What a healthy stand-in does with a request: 8 tokens about 30 ms apart.
HEALTHY = Behaviour(name="ok", ttft_ms=5.0, itl_ms=30.0)


class StandinSettings(EngineSettings):
    faulty: bool = False


@dataclass(frozen=True)
class Fault:
    """What a faulty stand-in does (all off: a healthy server)."""

    behaviours: tuple[Behaviour, ...] = ()
    startup_delay_s: float = 0.0
    startup_timeout_s: float | None = None
    exit_code: int | None = None
    workers: bool = False
    oom_after_requests: int | None = None
    oom_mb: int = 256
    port: int | None = None
    """Launch on this port instead of the free one chosen for it (a port someone took)."""
    extra_args: tuple[str, ...] = ()


@dataclass
class Launch:
    """One server start, with where its PID, worker PIDs and truth log land."""

    index: int
    faulty: bool
    port: int
    dir: Path

    @property
    def pidfile(self) -> Path:
        return self.dir / "server.pid"

    @property
    def workers_file(self) -> Path:
        return self.dir / "server.pid.workers"

    @property
    def truth_log(self) -> Path:
        return self.dir / "truth.jsonl"

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def worker_pids(self) -> list[int]:
        try:
            text = self.workers_file.read_text(encoding="utf-8")
        except OSError:
            return []
        return [int(x) for x in text.split()]


def _importable() -> str:
    """PYTHONPATH for `python -m faults.standin` from any folder: the repository root first."""
    import os

    root = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join(
        [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )


@dataclass
class StandinEngine(Engine):
    workdir: Path
    fault: Fault = field(default_factory=Fault)
    healthy: tuple[Behaviour, ...] = (HEALTHY,)
    launches: list[Launch] = field(default_factory=list)

    name: ClassVar[str] = "standin"
    profile: ClassVar[RequestProfile] = PROFILE  # the mock server it runs
    formats: ClassVar[frozenset[str]] = frozenset({"bf16"})

    def launch(
        self, artifact: Artifact, settings: StandinSettings, host: str, port: int
    ) -> LaunchSpec:
        fault = self.fault if settings.faulty else Fault()
        port = fault.port or port
        launch = Launch(
            len(self.launches), settings.faulty, port, self.workdir / f"launch-{len(self.launches)}"
        )
        launch.dir.mkdir(parents=True, exist_ok=True)
        self.launches.append(launch)
        script = launch.dir / "script.json"
        behaviours = list(fault.behaviours or self.healthy)
        script.write_text(Script(behaviours=behaviours).model_dump_json(), encoding="utf-8")
        argv = [sys.executable, "-m", "faults.standin"]
        argv += ["--qb-pidfile", str(launch.pidfile), "--log", str(launch.truth_log)]
        argv += ["--host", host, "--port", str(port), "--script", str(script)]
        if fault.startup_delay_s:
            argv += ["--qb-startup-delay", str(fault.startup_delay_s)]
        if fault.exit_code is not None:
            argv += ["--qb-exit", str(fault.exit_code)]
        if fault.workers:
            argv.append("--qb-workers")
        if fault.oom_after_requests is not None:
            argv += ["--qb-oom-after", str(fault.oom_after_requests)]
            argv += ["--qb-oom-mb", str(fault.oom_mb)]
        argv += [*settings.extra_args, *fault.extra_args]
        return LaunchSpec(
            engine=self.name,
            argv=argv,
            env={**self.base_env(settings), "PYTHONPATH": _importable()},
            host=host,
            port=port,
            ready_path="/health",
            metrics_path=None,
            model_name="mock-model",
            startup_timeout_s=fault.startup_timeout_s or settings.startup_timeout_s,
        )

    def version(self, settings: StandinSettings) -> str:
        return "standin-1"
