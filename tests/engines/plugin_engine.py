"""An engine defined outside src/: proof that adding one touches only its own module and params.

params.yaml names this file under `plugins:`; importing it registers the `echo` engine, whose
"server" is quantbench's own mock server (quantbench mock-server) answering with a fixed delay.
"""

from __future__ import annotations

import json
import sys
from typing import ClassVar

from pydantic import Field

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineSettings, KernelEfficiency, LaunchSpec
from quantbench.engines.registry import register_engine
from quantbench.load.requests import RequestProfile


class EchoSettings(EngineSettings):
    itl_ms: float = Field(2.0, ge=0, description="Delay before each token after the first.")
    max_tokens: int = Field(512, ge=1, description="Tokens one request may hold.")


class EchoEngine(Engine):
    name: ClassVar[str] = "echo"
    # fp16: the plugin format of tests/formats/fp16_plugin.py
    formats: ClassVar[frozenset[str]] = frozenset({"bf16", "fp16"})
    settings_model: ClassVar[type[EngineSettings]] = EchoSettings
    profile: ClassVar[RequestProfile] = RequestProfile(
        "echo", {"stream_options": {"include_usage": True}}, ("ignore_eos",)
    )

    def launch(
        self, artifact: Artifact, settings: EchoSettings, host: str, port: int
    ) -> LaunchSpec:
        script = artifact.path / "echo-script.json"
        behaviour = {"ttft_ms": 5, "itl_ms": settings.itl_ms}
        script.write_text(json.dumps({"model": artifact.name, "behaviours": [behaviour]}))
        argv = [sys.executable, "-m", "quantbench.mock_server", "--host", host, "--port"]
        argv += [str(port), "--script", str(script)]
        return self.launch_spec(argv, settings, host, port, artifact.name)

    def version(self, settings: EchoSettings) -> str:
        return "echo 1.0"

    # what the estimator asks of an engine: this one, on a CPU, before every other for bf16
    def estimate_preference(self, device_kind: str) -> int:
        return 9 if device_kind == "cpu" else 0

    def kernel_efficiency(self, device_kind: str) -> KernelEfficiency | None:
        return KernelEfficiency(compute=0.3, bandwidth=0.4, source="echo's own kernels")

    def context_limit(self, settings: EchoSettings) -> tuple[int, str] | None:
        return settings.max_tokens, "engines.echo.max_tokens"

    def suggest_sweep(self, centre: int, kv_capacity: int, input_len: int, output_len: int):
        return {"itl_ms": [1.0, 2.0]}


register_engine(EchoEngine())
