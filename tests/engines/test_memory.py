"""Settings that reserve memory are held against what the machine has before a server starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import LaunchSpec
from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings
from quantbench.engines.memory import (
    GIB,
    available_bytes,
    gguf_kv_bytes_per_token,
    hf_kv_bytes_per_token,
    shortfall,
)
from quantbench.engines.server import Server, ServerError
from quantbench.engines.transformers import TransformersEngine, TransformersSettings
from quantbench.engines.vllm import VllmEngine, VllmSettings

# SmolLM2-135M: 30 layers, 9 heads of 64, 3 KV heads: K+V of one token in 16 bits
SMOL = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "hidden_size": 576}  # fmt: skip
SMOL_KV_F16 = 2 * 30 * 3 * 64 * 2


def test_kv_bytes_per_token_from_a_config_and_from_the_real_gguf() -> None:
    assert hf_kv_bytes_per_token(SMOL, 2.0) == SMOL_KV_F16
    assert hf_kv_bytes_per_token({"text_config": SMOL}, 2.0) == SMOL_KV_F16
    from quantbench.model import embedded_gguf_path

    gguf = embedded_gguf_path()
    assert gguf_kv_bytes_per_token(gguf, "f16", "f16") == SMOL_KV_F16
    assert gguf_kv_bytes_per_token(gguf, "q8_0", "q8_0") == pytest.approx(SMOL_KV_F16 * 34 / 64)


def test_a_shortfall_names_every_need_and_the_fix() -> None:
    needs = [(int(0.3 * GIB), "weights"), (40 * GIB, "engines.vllm.kv_cache_gb")]
    why = shortfall(needs, "vllm", available=8 * GIB)
    assert why is not None
    assert "need at least 40.30 GiB (weights 0.30 GiB + engines.vllm.kv_cache_gb 40.00 GiB)" in why
    assert "8.00 GiB available" in why
    assert shortfall(needs[:1], "vllm", available=8 * GIB) is None
    assert available_bytes() is None or available_bytes() > 0


def test_each_engine_states_what_its_settings_reserve(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"x" * 1000)
    import json

    (tmp_path / "config.json").write_text(json.dumps(SMOL))
    python = tmp_path / "python"
    python.touch()
    hf = Artifact("bf16", "bf16", tmp_path)
    vllm = VllmEngine().launch(hf, VllmSettings(python=python, kv_cache_gb=3), "127.0.0.1", 1)
    assert dict((w, n) for n, w in vllm.memory_needs)["engines.vllm.kv_cache_gb"] == 3 * GIB
    cb = TransformersSettings(continuous_batching=True, cb_num_blocks=64, cb_block_size=32)
    tf = TransformersEngine().launch(hf, cb, "127.0.0.1", 1)
    kv = [n for n, w in tf.memory_needs if w.startswith("KV cache")]
    assert kv == [64 * 32 * SMOL_KV_F16]
    from quantbench.model import embedded_gguf_path

    binary = tmp_path / "llama-server"
    binary.touch()
    gguf = Artifact("q4", "gguf", embedded_gguf_path().parent, embedded_gguf_path())
    settings = LlamaCppSettings(binary=binary, ctx_size=8192, cache_type_k="q8_0")
    needs = LlamaCppEngine().launch(gguf, settings, "127.0.0.1", 1).memory_needs
    kv = [n for n, w in needs if "KV cache (ctx_size 8192, q8_0/f16)" in w]
    assert kv == [int(8192 * 30 * 192 * (34 / 32 + 2))]


def test_a_server_that_cannot_fit_is_refused_before_it_starts(tmp_path: Path) -> None:
    spec = LaunchSpec(
        engine="vllm", argv=["sleep", "30"], env={}, host="127.0.0.1", port=1,
        ready_path="/health", metrics_path=None, model_name="m", startup_timeout_s=5,
        memory_needs=((1 << 60, "engines.vllm.kv_cache_gb"),),
    )  # fmt: skip
    server = Server(spec, tmp_path / "server.log")
    with pytest.raises(ServerError, match="engines.vllm.kv_cache_gb"):
        server.start()
    assert server.process is None  # nothing was started, nothing to clean up


def test_preflight_refuses_a_kv_cache_larger_than_the_machine() -> None:
    """vLLM on a CPU reserves kv_cache_gb up front: more than the machine has in all can never
    start, and is refused before any work, naming the pair, the setting and its size; what fits
    passes (the weights, not built yet, are the server's own check at start)."""
    from quantbench import preflight
    from quantbench.config import load_config

    config = load_config("params.yaml")
    assert preflight.memory_problems(config, total=24 * GIB) == []
    big = config.model_copy(
        update={"engines": {**config.engines, "vllm": config.engine("vllm").model_copy(
            update={"kv_cache_gb": 64.0})}}
    )  # fmt: skip
    found = preflight.memory_problems(big, total=24 * GIB)
    vllm_pairs = [name for name, pair in config.bench.pairs.items() if pair.engine == "vllm"]
    assert len(found) == len(vllm_pairs) >= 1, found  # each vLLM pair named, none other
    for name, problem in zip(vllm_pairs, found, strict=True):
        assert problem.startswith(f"bench.pairs.{name}"), (name, problem)
        assert "engines.vllm.kv_cache_gb = 64.00 GiB" in problem and "24.0 GiB" in problem
