"""The fast GGUF header reader against the gguf package's own reader, field by field."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.formats.gguf_files import assert_same_as_gguf_reader, write_gguf

from quantbench.errors import UserError
from quantbench.formats.gguf_header import GgufArray, read_header


def test_every_kind_of_value_and_tensor_reads_as_gguf_reads_it(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "tiny.gguf")
    assert_same_as_gguf_reader(path)
    header = read_header(path)
    assert header.hparam("block_count") == 3 and header.fields["general.file_type"] == 7
    assert header.fields["tokenizer.ggml.tokens"] == GgufArray("STRING", 4)
    assert [t.n_bytes for t in header.tensors] == [4 * 64 * 4, 64 * 2, 64 * 2 * 34]


def test_a_big_endian_file_goes_to_gguf_reader(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "big.gguf", endian="big")
    assert read_header(path).hparam("context_length") == 2048
    assert_same_as_gguf_reader(path)


@pytest.mark.parametrize(
    ("content", "said"),
    [(b"", "empty"), (b"PK\x03\x04" + bytes(40), "not a GGUF file"), (None, "unreadable")],
)
def test_what_is_not_a_gguf_header_is_named(tmp_path: Path, content: bytes | None, said: str):
    path = tmp_path / "model.gguf"
    if content is None:  # a real header cut off in its metadata
        content = write_gguf(tmp_path / "whole.gguf").read_bytes()[:200]
    path.write_bytes(content)
    with pytest.raises(UserError, match=said) as info:
        read_header(path)
    assert str(path.resolve()) in str(info.value)


@pytest.mark.slow
def test_the_embedded_model_reads_as_gguf_reads_it() -> None:
    from quantbench.model import embedded_gguf_path

    assert_same_as_gguf_reader(embedded_gguf_path())  # a real vocabulary: 49,152 tokens, merges
