"""GGUF type sizes and llama.cpp mix rules."""

from __future__ import annotations

import pytest

from quantbench.estimate import gguf_types
from quantbench.estimate.formats import nominal_weight_bytes
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.roofline import WeightTensor


@pytest.mark.parametrize(
    ("type_name", "bits"),
    [
        ("F16", 16.0),
        ("Q8_0", 8.5),
        ("Q4_0", 4.5),
        ("Q4_1", 5.0),
        ("Q5_0", 5.5),
        ("Q4_K", 4.5),
        ("Q5_K", 5.5),
        ("Q6_K", 6.5625),
        ("Q2_K", 2.625),
        ("Q3_K", 3.4375),
    ],
)
def test_bits_per_weight_from_block_layouts(type_name, bits):
    assert gguf_types.type_bits_per_weight(type_name) == bits


def test_unknown_type_is_named():
    with pytest.raises(ValueError, match="Q9_9"):
        gguf_types.type_block("Q9_9")


def test_use_more_bits_picks_fourteen_of_thirty_layers():
    chosen = [i for i in range(30) if gguf_types._use_more_bits(i, 30)]
    # first 3 (30 // 8), last 4 (from 7 * 30 // 8 = 26), every third in between
    assert chosen == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]


def test_fallbacks_for_rows_not_divisible_by_the_block(smol):
    q = WeightTensor(role="attn_q", layer=3, rows=576, cols=576)
    down = WeightTensor(role="ffn_down", layer=3, rows=576, cols=1536)
    assert gguf_types.mix_tensor_type("Q4_K_M", q, smol) == "Q5_0"  # 576 % 256 != 0
    assert gguf_types.mix_tensor_type("Q4_K_M", down, smol) == "Q4_K"  # 1536 % 256 == 0
    more_bits_down = down.model_copy(update={"layer": 0})
    assert gguf_types.mix_tensor_type("Q4_K_M", more_bits_down, smol) == "Q6_K"
    odd = WeightTensor(role="attn_q", layer=3, rows=8, cols=40)  # not even a multiple of 32
    assert gguf_types.mix_tensor_type("Q4_K_M", odd, smol) == "F16"


def test_tied_embedding_takes_the_output_type(smol):
    embd = WeightTensor(role="token_embd", layer=None, rows=49152, cols=576)
    assert gguf_types.mix_tensor_type("Q4_0", embd, smol) == "Q8_0"  # Q6_K, then fallback
    assert gguf_types.mix_tensor_type("F16", embd, smol) == "F16"


def test_q4_k_m_on_the_embedded_model_matches_the_real_file(smol):
    # The project's Q4_K_M file of this model measured 6.17 bits/weight.
    variant = EstimatedVariant(format="gguf", gguf_type="Q4_K_M")
    assert nominal_weight_bytes(smol, variant).bits_per_weight == pytest.approx(6.17, abs=0.01)


def test_unknown_mix_is_named(smol):
    tensor = WeightTensor(role="attn_q", layer=0, rows=576, cols=576)
    with pytest.raises(ValueError, match="Q4_K_X"):
        gguf_types.mix_tensor_type("Q4_K_X", tensor, smol)
