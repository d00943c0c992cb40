"""Weight bytes read from a variant's real files (safetensors or GGUF), when they exist.

The files settle what nominal tables can only approximate: GGUF mixes with their per-tensor
types and fallbacks, packed GPTQ/AWQ tensors with their scales, zeros and index tensors.
Only headers are read (safetensors: the JSON header; GGUF: the tensor infos, through
:mod:`quantbench.formats.gguf_header`, which skips the vocabulary's arrays).
"""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from pathlib import Path

from quantbench.estimate.errors import EstimateInputError, MissingInputError
from quantbench.estimate.formats import (
    activation_dtype,
    get_layout,
    gguf_compute_dtype,
    nominal_weight_bytes,
)
from quantbench.formats.gguf_header import read_header
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.roofline import ModelShape, WeightBytes

SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "U32": 4,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
# Substrings naming the input embedding and the output head in HF and GGUF tensor names.
EMBEDDING_NAMES = ("embed_tokens", "token_embd.weight", "wte.weight", "embed_in")
HEAD_NAMES = ("lm_head", "output.weight", "embed_out")


def _role(name: str) -> str:
    if any(key in name for key in EMBEDDING_NAMES):
        return "embedding"
    if any(name == key or name.startswith(key) or f".{key}" in name for key in HEAD_NAMES):
        return "head"
    return "body"


def _safetensors_header(path: Path) -> dict[str, dict[str, object]]:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, dict[str, object]] = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return header


def safetensors_weight_bytes(
    folder: Path, arch: ModelShape, compute_dtype: str | None = None
) -> WeightBytes:
    """Weight bytes of an HF checkpoint folder, from its safetensors headers."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise MissingInputError(f"no *.safetensors files in {folder}")
    by_role: dict[str, float] = defaultdict(float)
    by_type: dict[str, float] = defaultdict(float)
    for path in files:
        for name, info in _safetensors_header(path).items():
            dtype = str(info["dtype"])
            if dtype not in SAFETENSORS_DTYPE_BYTES:
                raise EstimateInputError(f"{path}: tensor {name} has unknown dtype {dtype}")
            start, end = info["data_offsets"]  # type: ignore[misc]
            nbytes = float(end - start)  # type: ignore[operator]
            by_role[_role(name)] += nbytes
            by_type[dtype] += nbytes
    embedding = by_role["embedding"]
    head = by_role["head"] if by_role["head"] else embedding  # a tied head is the embedding
    return WeightBytes(
        stored_bytes=sum(by_role.values()),
        streamed_bytes=by_role["body"] + head,
        gathered_bytes_per_token=embedding / arch.vocab_size,
        weight_count=arch.total_params,
        compute_dtype=compute_dtype or activation_dtype(arch),
        source="file",
        detail=f"{len(files)} safetensors file(s) in {folder}",
        bytes_by_type=dict(by_type),
    )


def gguf_weight_bytes(path: Path, arch: ModelShape) -> WeightBytes:
    """Weight bytes of a GGUF file, per tensor type, from its tensor infos."""
    tensors = read_header(path).tensors
    by_role: dict[str, float] = defaultdict(float)
    by_type: dict[str, float] = defaultdict(float)
    streamed_by_type: dict[str, float] = defaultdict(float)
    has_head = any(_role(t.name) == "head" for t in tensors)
    for tensor in tensors:
        role, type_name, nbytes = _role(tensor.name), tensor.type_name, float(tensor.n_bytes)
        by_role[role] += nbytes
        by_type[type_name] += nbytes
        streamed = role != "embedding" or not has_head
        if streamed and len(tensor.shape) > 1:  # matrices set the compute dtype, norms do not
            streamed_by_type[type_name] += nbytes
    embedding = by_role["embedding"]
    head = by_role["head"] if has_head else embedding
    return WeightBytes(
        stored_bytes=sum(by_role.values()),
        streamed_bytes=by_role["body"] + head,
        gathered_bytes_per_token=embedding / arch.vocab_size,
        weight_count=arch.total_params,
        compute_dtype=gguf_compute_dtype(streamed_by_type),
        source="file",
        detail=f"GGUF {path} ({len(tensors)} tensors)",
        bytes_by_type=dict(by_type),
    )


def variant_weight_bytes(
    arch: ModelShape, variant: EstimatedVariant, model_dir: Path | None = None
) -> WeightBytes:
    """Weight bytes from the variant's file where one exists, else from nominal tables.

    Files are looked for in ``variant.path``; for a dense variant of the same dtype as the
    checkpoint, ``model_dir`` itself is that file.
    """
    path = variant.path
    if path is None and model_dir is not None and variant.format in ("bf16", "fp16", "fp32"):
        same_dtype = activation_dtype(arch) == variant.format and not arch.quantization_config
        path = model_dir if same_dtype and any(model_dir.glob("*.safetensors")) else None
    if path is None:
        return nominal_weight_bytes(arch, variant)
    if not path.exists():
        raise MissingInputError(f"variant {variant.name}: {path} does not exist")
    layout = get_layout(variant.format)
    if layout.gguf_file:
        gguf_path = path if path.is_file() else _single_gguf(path)
        return gguf_weight_bytes(gguf_path, arch)
    # weight-only formats compute in the activation dtype (None); w8a8 in int8
    return safetensors_weight_bytes(path, arch, compute_dtype=layout.file_compute(variant))


def _single_gguf(folder: Path) -> Path:
    found = sorted(folder.glob("*.gguf"))
    if len(found) != 1:
        raise MissingInputError(f"expected exactly one .gguf in {folder}, found {len(found)}")
    return found[0]
