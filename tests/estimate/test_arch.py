"""ModelShape reading, checked against counts done by hand on the tiny config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.errors import UserError
from quantbench.estimate.arch import architecture_from_config, read_architecture

from .conftest import QWEN3_4B_CONFIG, SMOL_CONFIG, TINY_CONFIG


def test_tiny_counts_by_hand(tiny):
    # attention: q 8x8 + k 4x8 + v 4x8 + o 8x8 = 192; gated MLP: 3 x 8 x 16 = 384
    assert tiny.layer_matmul_params == 192 + 384
    assert tiny.body_matmul_params == 2 * 576
    assert tiny.embedding_params == tiny.head_params == 32 * 8
    assert tiny.norm_params == (2 * 2 + 1) * 8
    # tied: the head is the embedding, counted once
    assert tiny.total_params == 1152 + 256 + 40
    # K and V, 1 KV head of 4, 2 layers
    assert tiny.kv_elements_per_token == 2 * 2 * 4


def test_roles_and_shapes(tiny):
    layer0 = {t.role: (t.rows, t.cols) for t in tiny.layer_tensors(0)}
    assert layer0 == {
        "attn_q": (8, 8),
        "attn_k": (4, 8),
        "attn_v": (4, 8),
        "attn_output": (8, 8),
        "ffn_gate": (16, 8),
        "ffn_up": (16, 8),
        "ffn_down": (8, 16),
    }
    roles = [t.role for t in tiny.weight_tensors()]
    assert roles.count("token_embd") == 1 and "output" not in roles


def test_untied_head_and_plain_mlp():
    config = {**TINY_CONFIG, "tie_word_embeddings": False, "model_type": "gpt_neox"}
    arch = architecture_from_config(config)
    assert not arch.gated_mlp
    assert arch.layer_matmul_params == 192 + 2 * 8 * 16
    assert arch.total_params == 2 * (192 + 256) + 256 + 256 + 40
    assert [t.role for t in arch.weight_tensors()][-1] == "output"


def test_smol_matches_the_published_parameter_count(smol):
    # model_info.json of the embedded model says 134,515,008 parameters
    assert smol.total_params == 134_515_008


def test_qwen3_4b_parameter_count(qwen3_4b):
    # Qwen3-4B: 4.02 B parameters with the tied embedding (the model card's figure)
    assert qwen3_4b.total_params == pytest.approx(4.02e9, rel=0.005)


def test_defaults_filled_in_and_noted():
    config = {
        k: v
        for k, v in TINY_CONFIG.items()
        if k not in ("head_dim", "num_key_value_heads", "tie_word_embeddings")
    }
    arch = architecture_from_config(config)
    assert arch.head_dim == 8 // 2
    assert arch.num_kv_heads == arch.num_heads
    assert arch.tie_word_embeddings is False  # LlamaConfig's default
    assert len(arch.notes) == 3


def test_gemma_ties_by_default():
    config = {**TINY_CONFIG, "model_type": "gemma"}
    del config["tie_word_embeddings"]
    assert architecture_from_config(config).tie_word_embeddings is True


def test_mixture_of_experts_is_refused_as_a_user_error():
    with pytest.raises(UserError, match="mixture-of-experts"):
        architecture_from_config({**QWEN3_4B_CONFIG, "num_experts": 128})


def test_unknown_model_type_needs_explicit_mlp_kind():
    config = {**TINY_CONFIG, "model_type": "mystery"}
    with pytest.raises(ValueError, match="pass gated_mlp"):
        architecture_from_config(config)
    assert architecture_from_config(config, gated_mlp=False).gated_mlp is False


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="hidden_size=0"):
        architecture_from_config({**TINY_CONFIG, "hidden_size": 0})
    with pytest.raises(ValueError, match="not a multiple"):
        architecture_from_config({**TINY_CONFIG, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="vocab_size"):
        architecture_from_config({k: v for k, v in TINY_CONFIG.items() if k != "vocab_size"})


def test_nested_text_config():
    arch = architecture_from_config({"model_type": "wrapper", "text_config": TINY_CONFIG})
    assert arch.hidden_size == 8


def test_read_from_folder_or_file(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps(SMOL_CONFIG))
    assert read_architecture(tmp_path) == read_architecture(tmp_path / "config.json")
    with pytest.raises(FileNotFoundError):
        read_architecture(tmp_path / "missing")


def test_streamed_shapes_cover_every_streamed_weight(smol):
    shares = smol.streamed_shape_shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    # the tied 49152 x 576 embedding is streamed as the head
    assert shares[(49152, 576)] == pytest.approx(
        49152 * 576 / (smol.total_params - smol.norm_params)
    )
