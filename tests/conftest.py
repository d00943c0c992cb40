"""Shared fixtures: a tiny random Llama with the real tokenizer (fast), the real embedded model (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIRST = REPO / "tests" / "native"


def pytest_collection_modifyitems(config, items) -> None:
    """Native-build checks first: a build that cannot run here fails in the first minute, before
    tests that would die on it much later (see tests/native/test_gguf_smoke.py)."""
    items.sort(key=lambda item: 0 if FIRST in Path(str(item.fspath)).parents else 1)


@pytest.fixture(scope="session")
def embedded_tokenizer():
    """The embedded model's tokenizer with its chat template, read from the shipped GGUF."""
    from transformers import AutoTokenizer

    from quantbench.model import embedded_gguf_path

    gguf = embedded_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, embedded_tokenizer) -> Path:
    """A 2-layer random Llama (GQA, gated MLP, tied embeddings) saved as a Hugging Face folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(embedded_tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=embedded_tokenizer.bos_token_id,
        eos_token_id=embedded_tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(out)
    embedded_tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def prepared_base(tmp_path_factory) -> Path:
    """The real embedded model prepared by the library (about 30 s)."""
    from quantbench.config import ModelSettings
    from quantbench.model import prepare_base
    from quantbench.runtime import configure_threads

    configure_threads(1)
    out = tmp_path_factory.mktemp("prepared") / "base"
    out.mkdir()
    prepare_base(ModelSettings(), out)
    return out
