"""A safetensors file's header, read and checked without reading any tensor.

The format (https://github.com/huggingface/safetensors): 8 bytes (little-endian u64) giving the
header's length N, N bytes of JSON mapping each tensor's name to its dtype, shape and
``data_offsets`` (begin, end: bytes into the data after the header), then the data. The header
alone shows a truncated or padded file (the data ends elsewhere than the last tensor says),
tensors that overlap or leave holes, and a tensor whose bytes disagree with its shape and
dtype: what a load would find only after minutes, found here in milliseconds.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Bytes per element of each dtype the format names (F8, F6 and F4 variants: bits / 8).
DTYPE_BYTES: dict[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
    "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8,
    "F6_E2M3": 0.75, "F6_E3M2": 0.75, "F4": 0.5,
}  # fmt: skip
# A header is a few MB even for the largest checkpoints; a length past this is not a header.
MAX_HEADER = 100 << 20


class SafetensorsError(ValueError):
    """The file is not a whole, consistent safetensors file; the message says what is wrong."""


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Header:
    path: Path
    tensors: dict[str, Tensor]
    metadata: dict[str, Any]


def _tensor(name: str, entry: Any) -> Tensor:
    if not isinstance(entry, dict):
        raise SafetensorsError(f"tensor {name!r}'s entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise SafetensorsError(f"tensor {name!r} has an unknown dtype {dtype!r}")
    if not (
        isinstance(shape, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise SafetensorsError(
            f"tensor {name!r} has a shape that is not a list of sizes: {shape!r}"
        )
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
        and offsets[0] <= offsets[1]
    ):
        raise SafetensorsError(f"tensor {name!r} has data_offsets {offsets!r}, not [begin, end]")
    wanted = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != wanted:
        raise SafetensorsError(
            f"tensor {name!r} ({dtype}, shape {shape}) needs {wanted:g} bytes but its "
            f"data_offsets hold {offsets[1] - offsets[0]}"
        )
    return Tensor(name, dtype, tuple(shape), offsets[0], offsets[1])


def read_header(path: str | Path) -> Header:
    """The header of ``path``, checked against the file's size (SafetensorsError otherwise)."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{size} bytes: too short to hold a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER, size - 8):
            raise SafetensorsError(
                f"its header says {length} bytes of header, and the file holds {size - 8} after "
                "the length: truncated, or not a safetensors file"
            )
        raw = handle.read(length)
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"its header is not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise SafetensorsError("its header is not a JSON object")
    metadata = parsed.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise SafetensorsError("its __metadata__ is not an object")
    tensors = {name: _tensor(name, entry) for name, entry in parsed.items()}
    data = size - 8 - length
    position = 0
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin != position:
            what = "overlaps the one before" if t.begin < position else "leaves a hole before it"
            raise SafetensorsError(f"tensor {t.name!r} starts at byte {t.begin}: {what}")
        position = t.end
    if position != data:
        if position > data:
            raise SafetensorsError(
                f"its tensors need {position} bytes of data and the file holds {data}: "
                f"truncated ({position - data} bytes missing)"
            )
        raise SafetensorsError(
            f"its tensors end at byte {position} of the data and the file holds {data}: "
            "bytes past the last tensor"
        )
    return Header(path, tensors, metadata)
