"""Real engines on the real embedded model: start, answer correctly while streaming, report memory,
stop with nothing left behind."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from quantbench.engines.artifact import load_artifact
from quantbench.engines.ports import free_port
from quantbench.engines.registry import get_engine
from quantbench.engines.server import Server
from quantbench.engines.spec import TransformersSettings


def run_and_check(launch, log_path: Path) -> dict:
    server = Server(launch, log_path)
    with server:
        server.warmup()
        answer = server.chat("What is the capital of France?", max_tokens=24)
        tree = {
            server.process.pid,
            *(p.pid for p in psutil.Process(server.process.pid).children(True)),
        }
    assert "Paris" in answer, answer
    report = server.report()
    assert report["peak_rss_bytes"] > 100 * 2**20, "a loaded 135M model uses over 100 MiB"
    leftovers = [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert leftovers == []
    return report


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("continuous_batching", [False, True])
def test_transformers_serves_bf16(prepared_base: Path, tmp_path, continuous_batching) -> None:
    artifact = load_artifact(prepared_base, "bf16")
    settings = TransformersSettings(continuous_batching=continuous_batching, cb_num_blocks=64)
    launch = get_engine("transformers").launch(artifact, settings, "127.0.0.1", free_port())
    report = run_and_check(launch, tmp_path / "server.log")
    assert ("--continuous-batching" in report["argv"]) == continuous_batching


@pytest.mark.server
@pytest.mark.parametrize("parallel", [1, 4])
def test_llamacpp_serves_gguf(tmp_path, parallel) -> None:
    from quantbench.engines.spec import LlamaCppSettings
    from quantbench.model import embedded_gguf_path

    # The GGUF shipped with the embedded model: llama-server serves it as is.
    artifact = load_artifact(embedded_gguf_path())
    launch = get_engine("llamacpp").launch(
        artifact, LlamaCppSettings(parallel=parallel), "127.0.0.1", free_port()
    )
    report = run_and_check(launch, tmp_path / "server.log")
    assert report["argv"][report["argv"].index("-np") + 1] == str(parallel)
