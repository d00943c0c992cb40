"""Base model preparation: embedded GGUF, local folder, hub (offline), and the errors users meet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.config import ModelSettings
from quantbench.fsutil import sha256_file, sha256_tree
from quantbench.model import ModelSourceError, check_local_folder, download_from_hub, prepare_base


def test_local_folder_is_prepared_with_hashes_and_architecture(tiny_model_dir, tmp_path) -> None:
    out = tmp_path / "base"
    out.mkdir()
    info = prepare_base(ModelSettings(source="local", path=tiny_model_dir), out)
    arch = info.architecture
    assert (arch.num_layers, arch.hidden_size, arch.intermediate_size) == (2, 64, 128)
    assert (arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim) == (4, 2, 16)
    assert arch.tie_word_embeddings is True
    assert info.weights_sha256["model.safetensors"] == sha256_file(out / "model.safetensors")
    assert info.folder_sha256 == sha256_tree(out, "*.safetensors")
    on_disk = json.loads((out / "model_info.json").read_text())
    assert on_disk["architecture"] == arch.model_dump()
    assert on_disk["schema_version"] == 1 and on_disk["source"]["source"] == "local"
    assert (out / "tokenizer.json").is_file()


def test_preparing_twice_gives_identical_weights(tiny_model_dir, tmp_path) -> None:
    hashes = []
    for name in ("a", "b"):
        out = tmp_path / name
        out.mkdir()
        hashes.append(prepare_base(ModelSettings(source="local", path=tiny_model_dir), out))
    assert hashes[0].folder_sha256 == hashes[1].folder_sha256


def test_missing_local_folder_says_what_to_do(tmp_path) -> None:
    with pytest.raises(ModelSourceError, match="is not a folder.*model.source: embedded"):
        check_local_folder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelSourceError, match="no config.json"):
        check_local_folder(tmp_path / "empty")


def test_hub_offline_points_to_a_local_folder(monkeypatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelSourceError) as info:
        download_from_hub("some-org/some-model-that-is-not-cached", None)
    message = str(info.value)
    assert "some-org/some-model-that-is-not-cached" in message
    assert "model.source: local" in message and "model.path" in message


@pytest.mark.slow
def test_embedded_model_is_prepared_and_answers(prepared_base: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from quantbench.chat import hf_answer_fn
    from quantbench.fidelity import GENERAL_PROMPTS, check_served
    from quantbench.quality.backends import HFBackend
    from quantbench.quality.reference import reference_answers

    info = json.loads((prepared_base / "model_info.json").read_text())
    assert info["source"]["source"] == "embedded"
    assert info["dtype"] == "bfloat16"
    arch = info["architecture"]
    assert (arch["num_layers"], arch["hidden_size"], arch["intermediate_size"]) == (30, 576, 1536)
    assert (arch["num_attention_heads"], arch["num_key_value_heads"]) == (9, 3)
    assert arch["vocab_size"] == 49152 and arch["num_parameters"] == 134_515_008
    tokenizer = AutoTokenizer.from_pretrained(prepared_base)
    assert tokenizer.chat_template, "the chat template must survive preparation"
    model = AutoModelForCausalLM.from_pretrained(prepared_base, dtype=torch.bfloat16)
    # A prompt whose answer wins by a clear margin at every token (the capital of France is a
    # near-tie on this base model's first token, and another CPU's bf16 kernels flip it).
    backend = HFBackend(model)
    ref = reference_answers(backend, tokenizer, [GENERAL_PROMPTS[0]], 16, {tokenizer.eos_token_id})
    assert ref[0].certain_tokens() >= 6, ref[0].margins
    assert "H2O" in ref[0].certain_text() or "H₂O" in ref[0].certain_text(), ref[0].texts[-1]
    answer = hf_answer_fn(model, tokenizer, 16)(GENERAL_PROMPTS[0])
    assert check_served(ref[0], answer).verdict == "match", answer


@pytest.mark.slow
def test_the_embedded_gguf_is_parsed_once(monkeypatch) -> None:
    """transformers parsed the shipped GGUF four times to load it (config twice, tokenizer,
    weights) and built gguf's tensor-name map once per tensor: 57 of the prepare stage's 90 s on
    an AVX2-only EPYC. Loaded now with one parse and one map, and gguf left as it was."""
    import gguf

    from quantbench.model import load_embedded

    parsed: list[object] = []
    mapped: list[tuple] = []
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    def counting_reader(path, mode="r"):
        parsed.append(path)
        return reader(path, mode)

    def counting_map(arch, n_blocks):
        mapped.append((arch, n_blocks))
        return name_map(arch, n_blocks)

    monkeypatch.setattr(gguf, "GGUFReader", counting_reader)
    monkeypatch.setattr(gguf, "get_tensor_name_map", counting_map)
    model, tokenizer = load_embedded("bfloat16")
    assert len(parsed) == 1, parsed
    assert len(mapped) == 1, mapped
    assert gguf.GGUFReader is counting_reader and gguf.get_tensor_name_map is counting_map
    assert model.config.num_hidden_layers == 30 and len(tokenizer) == 49152
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


def test_embedded_tokenizer_is_repaired(embedded_tokenizer) -> None:
    from quantbench.model import repair_gguf_tokenizer

    tok = repair_gguf_tokenizer(embedded_tokenizer)
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    # SmolLM2 splits digits one by one (llama.cpp's 'smollm' pre-tokenizer does too)
    digits = tok("1287", add_special_tokens=False)["input_ids"]
    assert [tok.decode([i]) for i in digits] == ["1", "2", "8", "7"]
    text = "Quorvath, founded in 1287 — café"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_linear_layer_names_are_found_once_per_machine(tmp_path, monkeypatch) -> None:
    """Found from the config the first time, read from the machine's cache after, and found
    again when the config changes (its key is the config and the transformers version)."""
    from transformers import LlamaConfig

    import quantbench.linear_names as model

    monkeypatch.setenv("QUANTBENCH_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "tiny"
    folder.mkdir()
    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=64)  # fmt: skip
    config.to_json_file(folder / "config.json")
    settings = ModelSettings(source="local", path=str(folder))
    model._linear_names.cache_clear()
    names = model.linear_layer_names(settings)
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "lm_head"} <= names
    assert len(list((tmp_path / "cache" / "linear-names").glob("*.json"))) == 1

    def refound(*args: object) -> set[str]:
        raise AssertionError("found again, not read from the cache")

    monkeypatch.setattr(model, "_names_from_config", refound)
    model._linear_names.cache_clear()
    assert model.linear_layer_names(settings) == names  # another process: the cache
    config.tie_word_embeddings = not config.tie_word_embeddings
    config.to_json_file(folder / "config.json")
    model._linear_names.cache_clear()
    with pytest.raises(AssertionError, match="found again"):
        model.linear_layer_names(settings)  # another config, another key
    model._linear_names.cache_clear()


def test_a_folder_transformers_saved_has_no_problems(tiny_model_dir) -> None:
    """The folder checks read what save_pretrained writes (safetensors, config, tokenizer and its
    chat template) and find nothing wrong: they are not stricter than the files."""
    from quantbench.model_files import local_folder_problems

    assert local_folder_problems(tiny_model_dir) == []


def test_weights_cut_short_or_of_another_config_are_named_with_the_fix(
    tiny_model_dir, tmp_path
) -> None:
    """Such a folder passes every check of params.yaml and fails minutes later, loading."""
    import json
    import shutil

    from quantbench.model_files import local_folder_problems

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    (problem,) = local_folder_problems(folder)
    assert problem.startswith(f"model.path: {folder}: model.safetensors: ")
    assert "truncated (1000 bytes missing)" in problem and "copy the file again" in problem
    shutil.copyfile(tiny_model_dir / "model.safetensors", weights)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 96}))
    found = "\n".join(local_folder_problems(folder))
    assert "config.json says vocab_size x hidden_size" in found and "x 96" in found
    assert "give the config.json saved with these weights" in found


def test_a_folder_without_config_or_chat_template_says_what_to_do(tiny_model_dir, tmp_path) -> None:
    import shutil

    from quantbench.model_files import local_folder_problems

    parent = tmp_path / "snapshots"
    shutil.copytree(tiny_model_dir, parent / "abc123")
    (problem,) = local_folder_problems(parent)  # the folder above the model's
    assert "has no config.json" in problem and "its subfolder abc123 has one: give that" in problem
    folder = parent / "abc123"
    (folder / "chat_template.jinja").unlink()
    (problem,) = local_folder_problems(folder)
    assert "no chat template" in problem and "instruct" in problem
