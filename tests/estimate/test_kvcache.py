"""KV-cache sizes: KV heads only, dtype independent of the weights."""

from __future__ import annotations

import pytest

from quantbench.estimate.arch import architecture_from_config
from quantbench.estimate.kvcache import kv_bytes_per_token, resolve_kv_dtype

from .conftest import TINY_CONFIG


def test_bytes_per_token_by_hand(tiny):
    assert kv_bytes_per_token(tiny, "bf16") == 16 * 2
    assert kv_bytes_per_token(tiny, "q8_0") == 16 * 34 / 32
    assert kv_bytes_per_token(tiny, "fp8") == 16


def test_grouped_query_attention_counts_kv_heads_only(smol, qwen3_4b):
    assert kv_bytes_per_token(smol, "bf16") == 2 * 30 * 3 * 64 * 2
    assert kv_bytes_per_token(qwen3_4b, "bf16") == 2 * 36 * 8 * 128 * 2


def test_auto_follows_the_checkpoint_dtype(tiny):
    assert resolve_kv_dtype("auto", tiny) == "bf16"
    fp32 = architecture_from_config({**TINY_CONFIG, "torch_dtype": "float32"})
    assert resolve_kv_dtype("auto", fp32) == "fp32"
    assert resolve_kv_dtype("q4_0", tiny) == "q4_0"


def test_unknown_dtype_is_named(tiny):
    with pytest.raises(ValueError, match="'int3'.*allowed"):
        resolve_kv_dtype("int3", tiny)
