"""GGUF files for the header reader's tests: one written with every kind of value, and the
check that compares what read_header gives with the gguf package's own reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantbench.formats.gguf_header import GgufArray, read_header


def assert_same_as_gguf_reader(path: Path) -> None:
    """Every metadata value and tensor info read_header gives equals GGUFReader's."""
    from gguf import GGUFReader
    from gguf.constants import GGUFValueType

    reader = GGUFReader(path)
    header = read_header(path)
    keys = {k for k in reader.fields if not k.startswith("GGUF.")}  # the reader's own pseudo-keys
    assert set(header.fields) == keys
    for key in keys:
        field, mine = reader.fields[key], header.fields[key]
        if field.types[0] == GGUFValueType.ARRAY:
            assert isinstance(mine, GgufArray), key
            assert (mine.element_type, mine.count) == (field.types[-1].name, len(field.data)), key
        else:
            assert mine == field.contents(), key
    theirs = [
        (t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.n_bytes))
        for t in reader.tensors
    ]
    assert [(t.name, t.type_name, t.shape, t.n_bytes) for t in header.tensors] == theirs


def write_gguf(path: Path, endian: str = "little") -> Path:
    """A small GGUF with a value of every kind and tensors of three types, by gguf's writer."""
    from gguf import GGMLQuantizationType, GGUFEndian, GGUFWriter

    writer = GGUFWriter(path, "llama", endianess=getattr(GGUFEndian, endian.upper()))
    writer.add_block_count(3)
    writer.add_context_length(2048)
    writer.add_embedding_length(64)
    writer.add_file_type(7)
    writer.add_name("tiny")
    writer.add_float32("test.f32", 0.25)
    writer.add_float64("test.f64", -1.5)
    writer.add_bool("test.flag", True)
    writer.add_int8("test.i8", -3)
    writer.add_uint64("test.u64", 2**40)
    writer.add_token_list(["<s>", "hello", "wörld", ""])
    writer.add_token_scores([0.0, -1.0, -2.0, -3.0])
    writer.add_array("test.ints", [1, 2, 3])
    writer.add_tensor("token_embd.weight", np.zeros((4, 64), dtype=np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float16))
    q8 = np.zeros((64, 2 * 34), dtype=np.uint8)  # 64 rows of 64 Q8_0 weights (34 bytes a block)
    writer.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
