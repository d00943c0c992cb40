"""A stand-in engine that launches the scripted mock server, so the bench logic runs end to end."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import Field

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineSettings, LaunchSpec
from quantbench.load.requests import RequestProfile
from quantbench.mock_server import PROFILE, Behaviour, Script


class FakeSettings(EngineSettings):
    """The fake server's 'server settings': its per-token delay and load sensitivity."""

    itl_ms: float = 5.0
    ms_per_concurrent: float = 0.0
    crash: bool = False
    answers: dict[str, str] = Field(default_factory=dict)
    """Known answers to chat questions (the mock server's Script.answers)."""


class FakeEngine(Engine):
    name: ClassVar[str] = "fake"
    formats: ClassVar[frozenset[str]] = frozenset({"bf16"})
    settings_model: ClassVar[type[EngineSettings]] = FakeSettings
    profile: ClassVar[RequestProfile] = PROFILE

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.resets: list[str] = []
        self.reset_answer = "reset"

    def reset_prefix_cache(self, base_url: str, settings: FakeSettings) -> str:
        self.resets.append(base_url)
        return self.reset_answer

    def launch(
        self, artifact: Artifact, settings: FakeSettings, host: str, port: int
    ) -> LaunchSpec:
        behaviour = Behaviour(
            ttft_ms=20.0, itl_ms=settings.itl_ms, ms_per_concurrent=settings.ms_per_concurrent
        )
        script = self.workdir / f"script-{port}.json"
        script.write_text(
            Script(behaviours=[behaviour], answers=settings.answers).model_dump_json()
        )
        argv = [sys.executable, "-m", "quantbench.mock_server", "--host", host]
        argv += ["--port", str(port), "--script", str(script)]
        if settings.crash:  # a server that exits at start-up, with something in its log
            argv = [sys.executable, "-c", "import sys; print('fatal: no weights'); sys.exit(7)"]
        return LaunchSpec(
            engine=self.name,
            argv=argv,
            env={},
            host=host,
            port=port,
            ready_path="/health",
            metrics_path=None,
            model_name="mock-model",
            startup_timeout_s=30,
        )

    def version(self, settings: FakeSettings) -> str:
        return "fake-1"


@pytest.fixture
def fake_engine(tmp_path: Path) -> FakeEngine:
    return FakeEngine(tmp_path)


@pytest.fixture
def fake_artifact(tmp_path: Path) -> Artifact:
    return Artifact("tiny", "bf16", tmp_path)
