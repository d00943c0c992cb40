"""`quantbench serve`: start one variant on one engine, print how to use it, stop on Ctrl-C."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping
from pathlib import Path

from quantbench.engines.artifact import Artifact, load_artifact
from quantbench.engines.base import EngineSettings, LaunchSpec
from quantbench.engines.registry import check_pair, get_engine
from quantbench.engines.server import Server, sigterm_as_interrupt
from quantbench.ports import free_port

VARIANTS_DIR = Path("models/variants")


def resolve_artifact(target: str) -> Artifact:
    """A variant name (models/variants/<name>) or a path to a model folder or a one-file
    variant (a .gguf file), named by its folder or its file's stem."""
    path = Path(target)
    if not path.exists() and (VARIANTS_DIR / target).exists():
        path = VARIANTS_DIR / target
    return load_artifact(path)


def example_request(server: Server) -> str:
    body = {
        "model": server.spec.model_name,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 32,
        "stream": True,
    }
    return (
        f"curl -N {server.url}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-d {shlex.quote(json.dumps(body))}"
    )


def serve(
    target: str,
    engine_name: str,
    settings: Mapping[str, EngineSettings],
    host: str = "127.0.0.1",
    port: int | None = None,
    log_dir: Path = Path("reports/logs"),
) -> int:
    artifact = resolve_artifact(target)
    check_pair(artifact.name, artifact.format, engine_name)
    engine = get_engine(engine_name)
    engine_settings = settings.get(engine_name) or engine.settings_model()

    def relaunch() -> LaunchSpec:  # a port we chose: another is as good, where it was lost
        return engine.launch(artifact, engine_settings, host, free_port(host))

    spec = engine.launch(artifact, engine_settings, host, port) if port else relaunch()
    log_path = log_dir / f"serve-{artifact.name}-{engine_name}.log"
    with (
        sigterm_as_interrupt(),
        Server(spec, log_path, relaunch=None if port else relaunch) as server,
    ):
        server.warmup()
        print(f"{engine_name} is serving {artifact.name} ({artifact.format}) at {server.url}")
        print(f"log: {log_path}")
        print("try:\n  " + example_request(server))
        print("Ctrl-C stops it.")
        try:
            while True:
                server.check_alive("while serving")
                time.sleep(1)
        except KeyboardInterrupt:
            print("\nstopping ...")
    return 0
