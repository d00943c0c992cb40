"""Weight bytes read from real files: safetensors headers and GGUF tensor infos."""

from __future__ import annotations

import numpy as np
import pytest

from quantbench.estimate.arch import read_architecture
from quantbench.estimate.checkpoint import (
    gguf_weight_bytes,
    safetensors_weight_bytes,
    variant_weight_bytes,
)
from quantbench.estimate.formats import nominal_weight_bytes
from quantbench.formats.gguf import gguf_file_type
from quantbench.schemas.estimate_inputs import EstimatedVariant


def test_safetensors_bytes_match_the_nominal_bf16_layout(tiny_folder):
    arch = read_architecture(tiny_folder)
    real = safetensors_weight_bytes(tiny_folder, arch)
    nominal = nominal_weight_bytes(arch, EstimatedVariant(format="bf16"))
    assert real.source == "file"
    assert real.stored_bytes == nominal.stored_bytes
    assert real.streamed_bytes == nominal.streamed_bytes  # tied: no lm_head tensor
    assert real.gathered_bytes_per_token == nominal.gathered_bytes_per_token


def test_dense_variant_of_the_checkpoint_reads_the_folder(tiny_folder):
    arch = read_architecture(tiny_folder)
    assert variant_weight_bytes(arch, EstimatedVariant(format="bf16"), tiny_folder).source == "file"
    # a format the folder is not stored in is nominal
    gptq = variant_weight_bytes(arch, EstimatedVariant(format="gptq"), tiny_folder)
    assert gptq.source == "nominal"


def test_missing_variant_path_is_named(tiny_folder):
    arch = read_architecture(tiny_folder)
    variant = EstimatedVariant(format="gguf", gguf_type="Q8_0", path=tiny_folder / "nope.gguf")
    with pytest.raises(FileNotFoundError, match=r"nope\.gguf"):
        variant_weight_bytes(arch, variant)


# rows of 32 and 64 inputs, so every matrix can be Q8_0 (blocks of 32)
GGUF_CONFIG = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "vocab_size": 64,
    "tie_word_embeddings": True,
}


def _write_gguf(path, arch):
    """Layer matrices in Q8_0, the (tied) embedding in F16, one F32 norm."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    rng = np.random.default_rng(0)
    for t in arch.layer_tensors(0):
        data = rng.standard_normal((t.rows, t.cols)).astype(np.float32)
        q8 = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(
            f"blk.0.{t.role}.weight",
            q8,
            raw_shape=q8.shape,
            raw_dtype=gguf.GGMLQuantizationType.Q8_0,
        )
    writer.add_tensor("token_embd.weight", np.zeros((64, 32), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_bytes_per_type(tmp_path):
    from quantbench.estimate.arch import architecture_from_config

    arch = architecture_from_config(GGUF_CONFIG)
    path = tmp_path / "small.gguf"
    _write_gguf(path, arch)
    w = gguf_weight_bytes(path, arch)
    layer_elements = 32 * 32 + 2 * 16 * 32 + 32 * 32 + 3 * 64 * 32
    assert w.bytes_by_type == {"Q8_0": layer_elements * 34 / 32, "F16": 64 * 32 * 2, "F32": 128}
    assert w.streamed_bytes == w.stored_bytes  # no output.weight: the embedding is the head
    assert w.gathered_bytes_per_token == 32 * 2
    assert w.compute_dtype == "int8"  # most streamed bytes are Q8_0
    assert gguf_file_type(path) == "Q8_0"
    variant = EstimatedVariant(format="gguf", path=path)
    assert variant_weight_bytes(arch, variant).source == "file"
