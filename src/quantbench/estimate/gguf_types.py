"""GGUF tensor types and llama.cpp quantisation mixes, for byte counts without a file.

Each GGML tensor type stores fixed-size blocks; its real bits per weight come from the block
layout, read from the ``gguf`` package (``GGML_QUANT_SIZES``: elements per block, bytes per
block), not from a hand-kept table: Q8_0 = 34 bytes / 32 weights = 8.5 bpw, Q4_K = 144 / 256 =
4.5, Q6_K = 210 / 256 = 6.5625.

A "mix" such as Q4_K_M is a llama.cpp file type: it picks a type per tensor (the head and
some attn_v / ffn_down layers get more bits) and falls back to another type when a tensor's
row length is not a multiple of the block size (256 for k-quants). On small models the
fallbacks dominate: SmolLM2-135M's hidden size 576 is not a multiple of 256, so its Q4_K_M
file is 6.17 bpw rather than ~4.9. The rules below restate llama.cpp's behaviour
(``llama_tensor_get_type_impl`` and ``tensor_type_fallback`` in ``src/llama-quant.cpp``, as
vendored by llama-cpp-python 0.3.36) for dense models without an importance matrix; other
llama.cpp versions differ in details, so these are nominal figures used only when no GGUF
file exists, and results say so.
"""

from __future__ import annotations

from functools import cache

from quantbench.estimate.errors import EstimateInputError
from quantbench.schemas.estimate_inputs import GGUF_MIXES, MIX_BASE_TYPE
from quantbench.schemas.roofline import ModelShape, WeightTensor

# Unquantised file types keep every matrix in the base type, head included.
_UNQUANTISED = frozenset({"F32", "F16", "BF16"})
# Type llama.cpp gives the output matrix (or the tied embedding acting as it) in quantised
# mixes, unless the mix is Q8_0.
OUTPUT_TYPE = "Q6_K"
# Type substituted when a row length is not a multiple of the chosen type's block size.
FALLBACK_TYPE: dict[str, str] = {
    "Q2_K": "Q4_0",
    "Q3_K": "Q4_0",
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}
# Last-resort type when even the fallback's block does not divide the row length.
LAST_RESORT_TYPE = "F16"


@cache
def type_block(type_name: str) -> tuple[int, int]:
    """(weights per block, bytes per block) of a GGML tensor type, from the gguf package."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        qtype = GGMLQuantizationType[type_name]
    except KeyError:
        known = sorted(t.name for t in GGML_QUANT_SIZES)
        raise EstimateInputError(
            f"unknown GGML tensor type {type_name!r}; known: {known}"
        ) from None
    return GGML_QUANT_SIZES[qtype]


def type_bits_per_weight(type_name: str) -> float:
    """Bits per weight of one GGML tensor type (block bytes * 8 / block weights)."""
    block, nbytes = type_block(type_name)
    return nbytes * 8 / block


def _use_more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of layers that get extra bits: first and last eighth, every third."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def _chosen_type(mix: str, tensor: WeightTensor, arch: ModelShape) -> str:
    """The type a mix assigns to a tensor before any block-size fallback."""
    base = MIX_BASE_TYPE[mix]
    if mix in _UNQUANTISED:
        return base
    n, i = arch.num_layers, tensor.layer if tensor.layer is not None else 0
    is_output = tensor.role == "output" or (
        tensor.role == "token_embd" and arch.tie_word_embeddings
    )
    if is_output:
        return "Q8_0" if mix == "Q8_0" else OUTPUT_TYPE
    if tensor.role == "attn_v":
        gqa = arch.num_heads // arch.num_kv_heads
        rules = {
            "Q2_K": "Q4_K" if gqa >= 4 else "Q3_K",
            "Q3_K_M": "Q5_K" if i < 2 else "Q4_K",
            "Q3_K_L": "Q5_K",
            "Q4_K_S": "Q5_K" if i < 4 else base,
            "Q4_K_M": "Q6_K" if _use_more_bits(i, n) else base,
            "Q5_K_M": "Q6_K" if _use_more_bits(i, n) else base,
        }
        return rules.get(mix, base)
    if tensor.role == "ffn_down":
        rules = {
            "Q2_K": "Q3_K",
            "Q3_K_M": "Q5_K" if i < n // 16 else "Q4_K",
            "Q3_K_L": "Q5_K",
            "Q4_K_S": "Q5_K" if i < n // 8 else base,
            "Q4_K_M": "Q6_K" if _use_more_bits(i, n) else base,
            "Q5_K_M": "Q6_K" if _use_more_bits(i, n) else base,
        }
        return rules.get(mix, base)
    if tensor.role == "attn_output":
        return {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(mix, base)
    return base


def mix_tensor_type(mix: str, tensor: WeightTensor, arch: ModelShape) -> str:
    """The GGML type a llama.cpp mix would store this tensor in, fallbacks applied."""
    if mix not in MIX_BASE_TYPE:
        raise EstimateInputError(f"unknown GGUF file type {mix!r}; known: {list(GGUF_MIXES)}")
    chosen = _chosen_type(mix, tensor, arch)
    if tensor.cols % type_block(chosen)[0] == 0:
        return chosen
    fallback = FALLBACK_TYPE.get(chosen, LAST_RESORT_TYPE)
    if tensor.cols % type_block(fallback)[0] == 0:
        return fallback
    return LAST_RESORT_TYPE


def tensor_bytes(type_name: str, tensor: WeightTensor) -> float:
    """Bytes of a tensor stored in a GGML type (rows of whole blocks)."""
    block, nbytes = type_block(type_name)
    return tensor.rows * (tensor.cols / block) * nbytes
