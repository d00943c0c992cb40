"""Bytes of a model's weights in each storage format, from nominal layouts.

Used when the variant's real file does not exist yet (see :mod:`.checkpoint` for reading
real files). Three quantities matter and are kept apart:

* stored bytes: what sits in memory (KV-cache capacity is what is left);
* streamed bytes: what a forward step reads once, shared by all its tokens (every layer's
  matrices, the norms, and the head, which is the embedding matrix when tied);
* gathered bytes per token: the embedding row each input token looks up.

Group-quantised formats (GPTQ, AWQ) store per group of ``g`` input weights a 16-bit scale
and, when they have zero points, a ``bits``-wide zero: ``bits + (16 + zero_bits) / g`` bits
per weight. Embedding and head stay in 16-bit, as the project's quantisers leave them.

int8 W8A8 (compressed-tensors "int-quantized", llm-compressor's SmoothQuant + GPTQ) stores one
byte per weight and one 16-bit scale per output row, and multiplies int8 by int8 (activations
quantized per token at run time): VNNI/AMX on x86 CPUs, int8 tensor cores on GPUs.
"""

from __future__ import annotations

import math
from collections import defaultdict

from quantbench.estimate import gguf_types
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.roofline import ModelShape, WeightBytes, WeightTensor

# Bytes per element of the dense formats.
DENSE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0}
# Bits of one group scale in GPTQ/AWQ checkpoints (fp16 or bf16).
GROUP_SCALE_BITS = 16
# fp8 checkpoints (vLLM/llm-compressor W8A8) keep one fp32 scale per output row.
FP8_ROW_SCALE_BYTES = 4
# int8 W8A8 checkpoints keep one 16-bit (the model's dtype) scale per output row.
W8A8_ROW_SCALE_BYTES = 2
W8A8_COMPUTE = "int8"
# Bytes per element of norm weights: 16-bit in HF checkpoints, F32 in GGUF files.
HF_NORM_BYTES = 2.0
GGUF_NORM_BYTES = 4.0
# GGUF types that are not block-quantised, mapped to the compute dtype used with them;
# every other GGUF type computes with 8-bit integer dot products (llama.cpp quantises the
# activations to Q8 blocks and uses int8 instructions, VNNI on this CPU).
GGUF_FLOAT_COMPUTE = {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}
GGUF_QUANT_COMPUTE = "int8"
# compute dtype for weight-only quantised formats: the activation dtype of the checkpoint.
_ACTIVATION_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def activation_dtype(arch: ModelShape) -> str:
    return _ACTIVATION_DTYPE.get(arch.dtype.removeprefix("torch."), "bf16")


def group_quant_bytes(tensor: WeightTensor, bits: int, group_size: int, zeros: bool) -> float:
    """Bytes of one matrix quantised in groups along its input dimension."""
    groups_per_row = 1 if group_size == -1 else math.ceil(tensor.cols / group_size)
    zero_bits = bits if zeros else 0
    packed = tensor.elements * bits / 8
    return packed + tensor.rows * groups_per_row * (GROUP_SCALE_BITS + zero_bits) / 8


def _tensor_bytes(
    variant: EstimatedVariant, arch: ModelShape, tensor: WeightTensor
) -> tuple[str, float]:
    """(type label, bytes) of one matrix in the variant's nominal layout."""
    is_edge = tensor.role in ("token_embd", "output")
    fmt = variant.format
    if fmt in DENSE_BYTES:
        if fmt == "fp8" and is_edge:
            return "bf16", tensor.elements * DENSE_BYTES["bf16"]
        scales = tensor.rows * FP8_ROW_SCALE_BYTES if fmt == "fp8" else 0.0
        return fmt, tensor.elements * DENSE_BYTES[fmt] + scales
    if fmt == "w8a8":
        if is_edge:
            return "bf16", tensor.elements * DENSE_BYTES["bf16"]
        return "int8", tensor.elements + tensor.rows * W8A8_ROW_SCALE_BYTES
    if fmt in ("gptq", "awq"):
        if is_edge:
            return "bf16", tensor.elements * DENSE_BYTES["bf16"]
        assert variant.bits is not None and variant.group_size is not None
        # GPTQ-format checkpoints store qzeros even when symmetric; compressed-tensors (our
        # AWQ) stores zero points only for asymmetric schemes.
        zeros = True if fmt == "gptq" else not variant.sym
        label = f"int{variant.bits}-g{variant.group_size}"
        return label, group_quant_bytes(tensor, variant.bits, variant.group_size, zeros)
    assert fmt == "gguf" and variant.gguf_type is not None
    ggml_type = gguf_types.mix_tensor_type(variant.gguf_type, tensor, arch)
    return ggml_type, gguf_types.tensor_bytes(ggml_type, tensor)


def _compute_dtype(variant: EstimatedVariant, arch: ModelShape, types: dict[str, float]) -> str:
    if variant.format in DENSE_BYTES:
        return variant.format
    if variant.format in ("gptq", "awq"):
        return activation_dtype(arch)
    if variant.format == "w8a8":
        return W8A8_COMPUTE
    return gguf_compute_dtype(types)


def gguf_compute_dtype(streamed_bytes_by_type: dict[str, float]) -> str:
    """Compute dtype of a GGUF model: that of the type holding most streamed bytes."""
    main_type = max(streamed_bytes_by_type, key=streamed_bytes_by_type.__getitem__)
    return GGUF_FLOAT_COMPUTE.get(main_type, GGUF_QUANT_COMPUTE)


def nominal_weight_bytes(arch: ModelShape, variant: EstimatedVariant) -> WeightBytes:
    """Weight bytes of ``variant`` from the format's layout, without reading any file."""
    stored: dict[str, float] = defaultdict(float)
    streamed: dict[str, float] = defaultdict(float)
    embedding_bytes = 0.0
    for tensor in arch.weight_tensors():
        label, nbytes = _tensor_bytes(variant, arch, tensor)
        stored[label] += nbytes
        if tensor.role == "token_embd":
            embedding_bytes = nbytes
            if not arch.tie_word_embeddings:
                continue  # looked up row by row, never streamed whole
        streamed[label] += nbytes
    norm_bytes = arch.norm_params * (GGUF_NORM_BYTES if variant.format == "gguf" else HF_NORM_BYTES)
    stored["norms"] += norm_bytes
    streamed["norms"] += norm_bytes

    matrix_types = {k: v for k, v in streamed.items() if k != "norms"}
    rule = {
        "gguf": "llama.cpp mix rules with block-size fallbacks (approximate)",
        "gptq": "packed weights + fp16 scale + packed zero per group; embedding/head bf16",
        "awq": "packed weights + bf16 scale (+ zero if asymmetric) per group; head bf16",
        "w8a8": "int8 weights + 16-bit scale per output row; embedding/head bf16",
    }.get(variant.format, f"{variant.format} everywhere")
    return WeightBytes(
        stored_bytes=sum(stored.values()),
        streamed_bytes=sum(streamed.values()),
        gathered_bytes_per_token=embedding_bytes / arch.vocab_size,
        weight_count=arch.total_params,
        compute_dtype=_compute_dtype(variant, arch, matrix_types),
        source="nominal",
        detail=f"{variant.label}: {rule}",
        bytes_by_type=dict(stored),
    )
