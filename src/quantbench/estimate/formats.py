"""Bytes of a model's weights in each storage layout, from nominal layouts: the layouts'
registry (:func:`register_layout`; the built-in ones at the end of this module, the fields each
takes declared with :data:`quantbench.schemas.estimate_inputs.WEIGHT_LAYOUTS`, which a stored
estimate is read by).

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
from collections.abc import Callable
from dataclasses import dataclass

from quantbench.estimate import gguf_types
from quantbench.estimate.errors import EstimateInputError
from quantbench.schemas.estimate_inputs import (
    GGUF_LAYOUT,
    WEIGHT_LAYOUTS,
    EstimatedVariant,
    LayoutFields,
    declare_layout,
)
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


TensorBytes = Callable[[EstimatedVariant, ModelShape, WeightTensor], tuple[str, float]]
ComputeDtype = Callable[[EstimatedVariant, ModelShape, dict[str, float]], str]


@dataclass(frozen=True)
class Layout:
    """One way of storing weights, as the estimator counts it: the layouts are a registry
    (:func:`register_layout`), so a format stored in a new way (NF4, say) adds its layout here
    and names it from its ``estimator_fields``; no estimator file changes."""

    name: str
    rule: str
    """How its bytes are counted, for the estimate's ``detail``."""
    tensor_bytes: TensorBytes
    """(type label, bytes) of one matrix in this layout."""
    compute_dtype: ComputeDtype
    """The dtype its matrices compute in, given the streamed bytes by type label."""
    file_compute: Callable[[EstimatedVariant], str | None]
    """The compute dtype of a real safetensors checkpoint of it (None: the activation dtype)."""
    fields: LayoutFields | None = None
    """Which of EstimatedVariant's fields it takes (bits, group_size, ...), with defaults; None:
    as declared for its name (the built-in layouts are declared in
    quantbench.schemas.estimate_inputs.WEIGHT_LAYOUTS, below the schemas that store them)."""
    norm_bytes: float = HF_NORM_BYTES
    gguf_file: bool = False
    """Its checkpoints are .gguf files (read by gguf_weight_bytes), not safetensors."""


_LAYOUTS: dict[str, Layout] = {}


def register_layout(layout: Layout) -> Layout:
    """Make ``layout`` known by its name, to the estimator and (with the fields it declares) to
    EstimatedVariant's checks; a layout that declares no fields takes those declared for its
    name (WEIGHT_LAYOUTS: the built-in ones)."""
    if layout.fields is not None:
        declare_layout(layout.name, layout.fields)
    elif layout.name not in WEIGHT_LAYOUTS:
        raise EstimateInputError(
            f"weight layout {layout.name!r} declares no fields (Layout.fields), and none are "
            "declared for its name"
        )
    _LAYOUTS[layout.name] = layout
    return layout


def get_layout(name: str) -> Layout:
    if name not in _LAYOUTS:
        raise EstimateInputError(
            f"weight layout {name!r} is unknown to the estimator; known: {', '.join(_LAYOUTS)} "
            "(a format stored in a new way registers one: estimate.formats.register_layout)"
        )
    return _LAYOUTS[name]


def layout_names() -> list[str]:
    return list(_LAYOUTS)


def _edge(tensor: WeightTensor) -> bool:
    """The embedding and the head: the project's quantisers leave them in 16-bit."""
    return tensor.role in ("token_embd", "output")


def _dense_bytes(variant: EstimatedVariant, arch: ModelShape, t: WeightTensor) -> tuple[str, float]:
    fmt = variant.format
    if fmt == "fp8" and _edge(t):
        return "bf16", t.elements * DENSE_BYTES["bf16"]
    scales = t.rows * FP8_ROW_SCALE_BYTES if fmt == "fp8" else 0.0
    return fmt, t.elements * DENSE_BYTES[fmt] + scales


def _w8a8_bytes(variant: EstimatedVariant, arch: ModelShape, t: WeightTensor) -> tuple[str, float]:
    if _edge(t):
        return "bf16", t.elements * DENSE_BYTES["bf16"]
    return "int8", t.elements + t.rows * W8A8_ROW_SCALE_BYTES


def _group_bytes(variant: EstimatedVariant, arch: ModelShape, t: WeightTensor) -> tuple[str, float]:
    if _edge(t):
        return "bf16", t.elements * DENSE_BYTES["bf16"]
    assert variant.bits is not None and variant.group_size is not None
    # GPTQ-format checkpoints store qzeros even when symmetric; compressed-tensors (our AWQ)
    # stores zero points only for asymmetric schemes.
    zeros = True if variant.format == "gptq" else not variant.sym
    label = f"int{variant.bits}-g{variant.group_size}"
    return label, group_quant_bytes(t, variant.bits, variant.group_size, zeros)


def _gguf_bytes(variant: EstimatedVariant, arch: ModelShape, t: WeightTensor) -> tuple[str, float]:
    assert variant.gguf_type is not None
    ggml_type = gguf_types.mix_tensor_type(variant.gguf_type, t, arch)
    return ggml_type, gguf_types.tensor_bytes(ggml_type, t)


def gguf_compute_dtype(streamed_bytes_by_type: dict[str, float]) -> str:
    """Compute dtype of a GGUF model: that of the type holding most streamed bytes."""
    main_type = max(streamed_bytes_by_type, key=streamed_bytes_by_type.__getitem__)
    return GGUF_FLOAT_COMPUTE.get(main_type, GGUF_QUANT_COMPUTE)


def nominal_weight_bytes(arch: ModelShape, variant: EstimatedVariant) -> WeightBytes:
    """Weight bytes of ``variant`` from its layout, without reading any file."""
    layout = get_layout(variant.format)
    stored: dict[str, float] = defaultdict(float)
    streamed: dict[str, float] = defaultdict(float)
    embedding_bytes = 0.0
    for tensor in arch.weight_tensors():
        label, nbytes = layout.tensor_bytes(variant, arch, tensor)
        stored[label] += nbytes
        if tensor.role == "token_embd":
            embedding_bytes = nbytes
            if not arch.tie_word_embeddings:
                continue  # looked up row by row, never streamed whole
        streamed[label] += nbytes
    norm_bytes = arch.norm_params * layout.norm_bytes
    stored["norms"] += norm_bytes
    streamed["norms"] += norm_bytes

    matrix_types = {k: v for k, v in streamed.items() if k != "norms"}
    return WeightBytes(
        stored_bytes=sum(stored.values()),
        streamed_bytes=sum(streamed.values()),
        gathered_bytes_per_token=embedding_bytes / arch.vocab_size,
        weight_count=arch.total_params,
        compute_dtype=layout.compute_dtype(variant, arch, matrix_types),
        source="nominal",
        detail=f"{variant.label}: {layout.rule.format(format=variant.format)}",
        bytes_by_type=dict(stored),
    )


for _name in DENSE_BYTES:
    register_layout(
        Layout(
            _name,
            "{format} everywhere",
            _dense_bytes,
            lambda variant, arch, types: variant.format,
            file_compute=lambda variant: variant.format,
        )
    )
for _name, _rule in (
    ("gptq", "packed weights + fp16 scale + packed zero per group; embedding/head bf16"),
    ("awq", "packed weights + bf16 scale (+ zero if asymmetric) per group; head bf16"),
):  # weight-only: they compute in the activations' dtype
    register_layout(
        Layout(
            _name,
            _rule,
            _group_bytes,
            lambda variant, arch, types: activation_dtype(arch),
            file_compute=lambda variant: None,
        )
    )
register_layout(
    Layout(
        "w8a8",
        "int8 weights + 16-bit scale per output row; embedding/head bf16",
        _w8a8_bytes,
        lambda variant, arch, types: W8A8_COMPUTE,
        file_compute=lambda variant: W8A8_COMPUTE,
    )
)
register_layout(
    Layout(
        GGUF_LAYOUT,
        "llama.cpp mix rules with block-size fallbacks (approximate)",
        _gguf_bytes,
        lambda variant, arch, types: gguf_compute_dtype(types),
        file_compute=lambda variant: None,  # not used: a GGUF is read by gguf_weight_bytes
        norm_bytes=GGUF_NORM_BYTES,
        gguf_file=True,
    )
)
