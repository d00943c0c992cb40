"""KV-cache element types and their sizes, kept separate from the weight format.

An engine chooses the KV-cache dtype independently of how the weights are stored: a 4-bit
AWQ model usually keeps a bf16 cache, vLLM can use fp8, llama.cpp can quantise its cache to
q8_0 or q4_0 (``--cache-type-k/-v``). Block types include their scales: q8_0 stores 32 values
in 34 bytes.
"""

from __future__ import annotations

from quantbench.estimate.errors import EstimateInputError
from quantbench.schemas.roofline import ModelShape

# Bytes per cached element, per cache dtype name (vLLM and llama.cpp spellings).
KV_CACHE_BYTES_PER_ELEMENT: dict[str, float] = {
    "f32": 4.0,
    "fp32": 4.0,
    "bf16": 2.0,
    "f16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}
KV_CACHE_DTYPES = ("auto", *KV_CACHE_BYTES_PER_ELEMENT)

# torch dtype names in config.json -> cache dtype an engine uses when told "auto".
_AUTO_FROM_MODEL_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def resolve_kv_dtype(kv_cache_dtype: str, arch: ModelShape) -> str:
    """Name the cache dtype actually used; ``auto`` follows the checkpoint's dtype."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise EstimateInputError(
            f"kv_cache_dtype {kv_cache_dtype!r} is not supported; allowed: {list(KV_CACHE_DTYPES)}"
        )
    if kv_cache_dtype != "auto":
        return kv_cache_dtype
    return _AUTO_FROM_MODEL_DTYPE.get(arch.dtype.removeprefix("torch."), "bf16")


def kv_bytes_per_token(arch: ModelShape, kv_dtype: str) -> float:
    """Bytes of K and V cached per token over all layers (KV heads only, not query heads)."""
    return arch.kv_elements_per_token * KV_CACHE_BYTES_PER_ELEMENT[kv_dtype]
