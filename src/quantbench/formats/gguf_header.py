"""A GGUF file's metadata and tensor table, read without its arrays' contents.

`gguf.GGUFReader` (the gguf package's reader, which llama.cpp maintains) builds a NumPy view for
every element of every metadata array before it returns: a tokenizer's vocabulary and merges are
about 600,000 views in a 135M model's file, 8 to 15 s on 2 cores, for callers that want five
integers (a model's widths, its file type) or the tensor table (their bytes per type). Those
callers were every `quantbench validate`, every llama-server launch (its KV cache size) and the
estimate stage (six files: about 45 s of its 57 on an AVX2-only EPYC).

This reads the same header (GGUF v2 and v3, little-endian; the layout of ggml's gguf.c) in one
pass: scalar values decoded, arrays recorded by element type and count and skipped (string
arrays by walking their lengths), tensor infos as the reader reports them. The value and type
codes, the magic number and the quantization block sizes come from the gguf package's own
constants; tests/formats/test_gguf_header.py compares every scalar and tensor with GGUFReader's on
real files. Files this does not read (big-endian, another version) go to GGUFReader.
"""

from __future__ import annotations

import functools
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench.errors import UserError


@dataclass(frozen=True)
class GgufTensor:
    """One tensor info: dims in the file's order (ggml's ne[0] first), ggml type name, bytes."""

    name: str
    type_name: str
    shape: tuple[int, ...]
    n_bytes: int


@dataclass(frozen=True)
class GgufArray:
    """A metadata array, described rather than read: its element type and length."""

    element_type: str
    count: int


@dataclass(frozen=True)
class GgufHeader:
    """Every metadata key (scalars decoded; arrays as GgufArray) and every tensor info."""

    version: int
    fields: dict[str, Any]
    tensors: tuple[GgufTensor, ...]

    def hparam(self, name: str) -> Any:
        """``<general.architecture>.<name>``, e.g. ``block_count``."""
        return self.fields[f"{self.fields['general.architecture']}.{name}"]


class _Cursor:
    """Little-endian reads from a buffer at a moving offset."""

    def __init__(self, buf: Any) -> None:
        self.buf = buf
        self.at = 0

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("Q")
        raw = bytes(self.buf[self.at : self.at + n])
        self.at += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        for _ in range(count):
            (n,) = struct.unpack_from("<Q", self.buf, self.at)
            self.at += 8 + n


@functools.cache
def _codes() -> tuple[dict[int, str], dict[int, str], dict[int, tuple[int, int]], int]:
    from gguf.constants import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType

    value_types = {int(t): t.name for t in GGUFValueType}
    ggml_types = {int(t): t.name for t in GGMLQuantizationType}
    sizes = {int(t): size for t, size in GGML_QUANT_SIZES.items()}
    return value_types, ggml_types, sizes, GGUF_MAGIC


# struct formats of the fixed-size value types
_SCALAR = {
    "UINT8": "B", "INT8": "b", "UINT16": "H", "INT16": "h", "UINT32": "I", "INT32": "i",
    "FLOAT32": "f", "BOOL": "?", "UINT64": "Q", "INT64": "q", "FLOAT64": "d",
}  # fmt: skip


def _value(cur: _Cursor, type_name: str, value_types: dict[int, str]) -> Any:
    if type_name == "STRING":
        return cur.string()
    if type_name == "ARRAY":
        element = value_types[cur.take("I")]
        count = cur.take("Q")
        if element == "STRING":
            cur.skip_strings(count)
        elif element in _SCALAR:
            cur.at += count * struct.calcsize(_SCALAR[element])
        else:  # arrays of arrays: ggml writes none; read them one by one
            for _ in range(count):
                _value(cur, element, value_types)
        return GgufArray(element_type=element, count=count)
    return cur.take(_SCALAR[type_name])


def _parse(buf: Any, path: Path) -> GgufHeader | None:
    value_types, ggml_types, sizes, magic = _codes()
    cur = _Cursor(buf)
    if len(buf) < 24 or cur.take("I") != magic:
        raise UserError(f"{path} is not a GGUF file (no GGUF magic number at its start)")
    version = cur.take("I")
    if version not in (2, 3):  # a big-endian file reads as a huge version here
        return None
    n_tensors, n_kv = cur.take("Q"), cur.take("Q")
    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        fields[key] = _value(cur, value_types[cur.take("I")], value_types)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        shape = tuple(cur.take("Q") for _ in range(cur.take("I")))
        code = cur.take("I")
        cur.take("Q")  # the data's offset: not needed
        block, type_size = sizes[code]
        n_bytes = math.prod(shape) * type_size // block
        tensors.append(GgufTensor(name, ggml_types[code], shape, n_bytes))
    return GgufHeader(version=version, fields=fields, tensors=tuple(tensors))


def _from_reader(path: Path) -> GgufHeader:
    """The gguf package's reader, for the files the fast path does not take."""
    from gguf import GGUFReader
    from gguf.constants import GGUFValueType

    reader = GGUFReader(path)
    fields: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # the reader's own entries for the header's counts
            continue
        if field.types and field.types[0] == GGUFValueType.ARRAY:
            element = field.types[1].name if len(field.types) > 1 else "UINT8"
            fields[key] = GgufArray(element_type=element, count=len(field.data))
        else:
            fields[key] = field.contents()
    tensors = tuple(
        GgufTensor(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.n_bytes))
        for t in reader.tensors
    )
    version = int(reader.fields["GGUF.version"].contents())
    return GgufHeader(version=version, fields=fields, tensors=tensors)


def read_header(path: str | Path) -> GgufHeader:
    """The header of the GGUF file at ``path`` (cached per file and modification)."""
    path = Path(path)
    stat = path.stat()
    return _read_header(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _read_header(path: Path, size: int, mtime_ns: int) -> GgufHeader:
    if size == 0:
        raise UserError(f"{path} is empty, not a GGUF file")
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            header = _parse(buf, path)
        except (struct.error, KeyError) as exc:  # cut short, or a code this gguf does not know
            raise UserError(f"{path}: unreadable GGUF header ({exc!r})") from exc
    return header if header is not None else _from_reader(path)
