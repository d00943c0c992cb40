"""An engine defined outside src/ that runs in an environment of its own: `ministream`.

Its server (ministream_server.py beside this file, standard library only) runs with the venv that
`quantbench env ministream` creates from ministream-requirements.txt, where quantbench is not
installed: nothing of it leaks into the server. params.yaml names this file under `plugins:`;
three files in all (this, the server, the requirements). tests/test_plugins_under_dvc.py runs it
through `dvc repro`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineEnvironment, EngineSettings, LaunchSpec
from quantbench.engines.registry import register_engine
from quantbench.load.requests import RequestProfile

HERE = Path(__file__).resolve().parent


class MinistreamSettings(EngineSettings):
    python: Path = Field(
        Path(".venv-ministream/bin/python"), description="Its environment's interpreter."
    )
    itl_ms: float = Field(2.0, ge=0, description="Delay before each token after the first.")


class Ministream(Engine):
    name: ClassVar[str] = "ministream"
    formats: ClassVar[frozenset[str]] = frozenset({"bf16", "fp16"})
    settings_model: ClassVar[type[EngineSettings]] = MinistreamSettings
    # ignore_eos: its server always writes max_tokens tokens, so the field holds trivially and
    # workloads with a fixed output length run on it
    profile: ClassVar[RequestProfile] = RequestProfile(
        "ministream", {"stream_options": {"include_usage": True}}, ("ignore_eos",)
    )
    # what its stamp covers besides this file: editing the server reruns its bench stages
    code_files: ClassVar[tuple[str, ...]] = (
        str(HERE / "ministream_server.py"),
        str(HERE / "ministream-requirements.txt"),
    )

    def environment(self, settings: MinistreamSettings) -> EngineEnvironment:
        return EngineEnvironment(
            python=settings.python,
            setting="engines.ministream.python",
            packages=("pip",),
            requirements=(str(HERE / "ministream-requirements.txt"),),
        )

    def launch(
        self, artifact: Artifact, settings: MinistreamSettings, host: str, port: int
    ) -> LaunchSpec:
        argv = [self.python(settings), str(HERE / "ministream_server.py"), "--host", host]
        argv += ["--port", str(port), "--model", artifact.name, "--itl-ms", str(settings.itl_ms)]
        return self.launch_spec(argv, settings, host, port, artifact.name)

    def version(self, settings: MinistreamSettings) -> str:
        done = subprocess.run(
            [self.python(settings), "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return f"ministream 1.0 (Python {done.stdout.strip()})"


register_engine(Ministream())
