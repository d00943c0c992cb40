"""Shared fixtures: configs small enough to count by hand, and a fake measured CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quantbench.estimate.arch import architecture_from_config
from quantbench.schemas.hardware import CpuMeasurement, HardwareSpec
from quantbench.schemas.roofline import ModelShape

# hidden 8, MLP 16 (gated), 2 layers, 2 heads of 4, 1 KV head, vocab 32, tied embeddings.
TINY_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 4,
    "vocab_size": 32,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}

# The embedded default model (SmolLM2-135M-Instruct).
SMOL_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
    "dtype": "bfloat16",
}

# Qwen3-4B's published config (the model of seed 000's llm-optimizer example).
QWEN3_4B_CONFIG: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}


@pytest.fixture
def tiny() -> ModelShape:
    return architecture_from_config(TINY_CONFIG)


@pytest.fixture
def smol() -> ModelShape:
    return architecture_from_config(SMOL_CONFIG)


@pytest.fixture
def qwen3_4b() -> ModelShape:
    return architecture_from_config(QWEN3_4B_CONFIG)


@pytest.fixture
def tiny_folder(tmp_path: Path) -> Path:
    """An HF-style folder with the tiny config and its bf16 weights in safetensors."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    arch = architecture_from_config(TINY_CONFIG)
    names = {
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    tensors = {"model.embed_tokens.weight": torch.zeros(32, 8, dtype=torch.bfloat16)}
    for t in arch.weight_tensors():
        if t.layer is not None:
            name = f"model.layers.{t.layer}.{names[t.role]}.weight"
            tensors[name] = torch.zeros(t.rows, t.cols, dtype=torch.bfloat16)
    for layer in range(2):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{layer}.{norm}.weight"] = torch.ones(8, dtype=torch.bfloat16)
    tensors["model.norm.weight"] = torch.ones(8, dtype=torch.bfloat16)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def fake_cpu(
    copy_gbs: float = 20.0,
    gemv_bf16: dict[int, float] | None = None,
    shape_bf16: dict[str, float] | None = None,
    bf16_tflops: float = 0.2,
) -> HardwareSpec:
    """A measured-CPU spec with chosen figures, without measuring anything."""
    gemv = {"bf16": gemv_bf16 or {512: 5.0, 2048: 10.0}}
    measurement = CpuMeasurement(
        threads=1,
        copy_gbs=copy_gbs,
        read_gbs=copy_gbs,
        gemv_gbs=gemv,
        gemv_shape_gbs={"bf16": shape_bf16} if shape_bf16 else {},
        gemm_tflops={"bf16": bf16_tflops},
        load_average=0.0,
        cpu_model="test cpu",
        torch_version="0",
        measured_at="2026-01-01T00:00:00+00:00",
        seconds=0.0,
    )
    return HardwareSpec(
        name="fake cpu",
        kind="cpu",
        memory_gb=16.0,
        memory_bandwidth_gbs=copy_gbs,
        matmul_tflops={"bf16": bf16_tflops},
        compute_efficiency=1.0,
        bandwidth_efficiency={"default": 1.0},
        source="test",
        measurement=measurement,
    )
