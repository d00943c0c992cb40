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


@pytest.fixture(scope="module")
def gguf_q8_0(prepared_base: Path, tmp_path_factory) -> Path:
    """A Q8_0 GGUF of the prepared model, made by the project's own converter and quantizer."""
    from quantbench.quantize import build_variant
    from quantbench.quantize.spec import GgufSpec

    out = tmp_path_factory.mktemp("gguf") / "gguf-q8_0"
    out.mkdir()
    spec = GgufSpec(format="gguf", type="Q8_0")
    build_variant("gguf-q8_0", spec, prepared_base, out, None, 1)
    return out


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("parallel", [1, 4])
def test_llamacpp_serves_gguf(gguf_q8_0: Path, tmp_path, parallel) -> None:
    from quantbench.engines.spec import LlamaCppSettings

    artifact = load_artifact(gguf_q8_0)
    assert artifact.format == "gguf"
    launch = get_engine("llamacpp").launch(
        artifact, LlamaCppSettings(parallel=parallel), "127.0.0.1", free_port()
    )
    report = run_and_check(launch, tmp_path / "server.log")
    assert report["argv"][report["argv"].index("-np") + 1] == str(parallel)


@pytest.mark.server
@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_serves_bf16(prepared_base: Path, tmp_path) -> None:
    from quantbench.engines.spec import VllmSettings

    settings = VllmSettings(device="cpu", max_model_len=1024, kv_cache_gb=1)
    if not settings.python.exists():
        pytest.fail(f"{settings.python} is missing: `make vllm` installs vLLM's environment")
    artifact = load_artifact(prepared_base, "bf16")
    launch = get_engine("vllm").launch(artifact, settings, "127.0.0.1", free_port())
    report = run_and_check(launch, tmp_path / "server.log")
    assert report["ready_seconds"] is not None
