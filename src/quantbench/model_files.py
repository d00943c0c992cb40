"""A local model folder's files, checked without loading anything (`quantbench validate`).

What a folder shows wrong from its files alone: no config.json (or one that is not JSON), no
tokenizer or no chat template, no weights or a shard its index names that is missing, and each
safetensors file's header against the file's size (cut short, padded) and against config.json
(a tensor's shape, the layer count). Apart from :mod:`quantbench.model` so that the prepare
stage, which loads the folder, does not depend on these checks' code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from quantbench.errors import UserError, shown
from quantbench.hfconfig import read_hf_config, text_config
from quantbench.safetensors_header import SafetensorsError, read_header

# What a tokenizer is saved as: one of these beside the weights.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
INDEX_FILE = "model.safetensors.index.json"


def local_folder_problems(path: Path) -> list[str]:
    """Everything a local model folder shows wrong without loading it, each naming model.path,
    the file and the fix: no folder, no config.json (or one that is not JSON), no tokenizer or
    no chat template (the held-out questions and the chat workloads are asked as chat turns),
    no weights, a shard the index names that is missing, and each safetensors file's header
    against its size (truncated) and against config.json (a tensor's shape, the layer count).
    Weights saved as *.bin (pickles) are only looked for: their shapes cannot be read without
    loading them."""
    where = f"model.path: {shown(path)}"
    if path.is_file():
        return [
            f"{where} is a file, not a folder; give the Hugging Face model folder that holds it "
            "(config.json, the tokenizer and *.safetensors), or set model.source: embedded"
        ]
    if not path.is_dir():
        return [
            f"{where} is not a folder; give a Hugging Face model folder "
            "(with config.json and *.safetensors), or set model.source: embedded"
        ]
    if not (path / "config.json").is_file():
        inside = sorted(p.parent.name for p in path.glob("*/config.json"))
        hint = f" (its subfolder {shown(inside[0])} has one: give that)" if inside else ""
        return [
            f"{where} has no config.json, so it is not a Hugging Face model folder{hint}; give "
            "the folder that holds config.json beside the weights (a hub download's is "
            "models--<org>--<name>/snapshots/<commit>/), or set model.source: embedded"
        ]
    found: list[str] = []
    try:
        config: dict[str, Any] | None = text_config(read_hf_config(path))
    except UserError as exc:
        found.append(f"{where}: {exc}; save the model's config again (model.save_pretrained)")
        config = None
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        found.append(
            f"{where} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save it beside "
            "the weights (tokenizer.save_pretrained(folder))"
        )
    elif not _has_chat_template(path):
        found.append(
            f"{where}: its tokenizer has no chat template, and the held-out questions and the "
            "chat workloads are asked as chat turns; use the model's instruct (chat) version, "
            "or add a template (tokenizer.chat_template = ...; tokenizer.save_pretrained(folder))"
        )
    files = sorted(path.glob("*.safetensors"))
    if not files and not any(path.glob("*.bin")):
        found.append(
            f"{where} has no *.safetensors or *.bin weights; copy the weights into it "
            "(a download cut short leaves only the small files)"
        )
    found += _index_problems(path, where)
    tensors: dict[str, tuple[int, ...]] = {}
    for file in files:
        try:
            header = read_header(file)
        except (SafetensorsError, OSError) as exc:
            found.append(
                f"{where}: {shown(file.name)}: {exc}; copy the file again (or save the model again)"
            )
            continue
        tensors.update({name: t.shape for name, t in header.tensors.items()})
    if config is not None and tensors:
        found += [f"{where}: {p}" for p in shape_problems(config, tensors)]
    return found


def _has_chat_template(path: Path) -> bool:
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    try:
        tokenizer_config = json.loads((path / "tokenizer_config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return bool(isinstance(tokenizer_config, dict) and tokenizer_config.get("chat_template"))


def _index_problems(path: Path, where: str) -> list[str]:
    """A sharded checkpoint's index against its shards: each file it names must be there."""
    index = path / INDEX_FILE
    if not index.is_file():
        return []
    try:
        weight_map = json.loads(index.read_text("utf-8"))["weight_map"]
        named = sorted({str(f) for f in weight_map.values()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [f"{where}: {INDEX_FILE} is not a weight index ({exc}); save the model again"]
    missing = [f for f in named if not (path / f).is_file()]
    if not missing:
        return []
    return [
        f"{where}: {INDEX_FILE} names {len(missing)} of {len(named)} shards that are not there "
        f"({', '.join(shown(m) for m in missing[:3])}); copy the missing shards"
    ]


def shape_problems(config: dict[str, Any], tensors: dict[str, tuple[int, ...]]) -> list[str]:
    """The weights' shapes against config.json, where the tensors carry the usual names (the
    Llama family's, which most decoder-only models share): the embedding is vocab_size x
    hidden_size, the layers are num_hidden_layers, each MLP projection and attention query
    has the config's widths. A tensor the config does not describe is left alone."""
    found = []

    def number(key: str) -> int | None:
        value = config.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    hidden, vocab = number("hidden_size"), number("vocab_size")
    layers, inter = number("num_hidden_layers"), number("intermediate_size")
    heads = number("num_attention_heads")
    head_dim = number("head_dim") or (hidden // heads if hidden and heads else None)
    expected: list[tuple[str, tuple[int | None, ...], str]] = [
        ("embed_tokens.weight", (vocab, hidden), "vocab_size x hidden_size"),
        ("mlp.gate_proj.weight", (inter, hidden), "intermediate_size x hidden_size"),
        ("mlp.up_proj.weight", (inter, hidden), "intermediate_size x hidden_size"),
        ("mlp.down_proj.weight", (hidden, inter), "hidden_size x intermediate_size"),
        ("self_attn.q_proj.weight", ((heads or 0) * (head_dim or 0) or None, hidden),
         "num_attention_heads x head_dim, hidden_size"),
    ]  # fmt: skip
    for suffix, want, what in expected:
        for name, shape in sorted(tensors.items()):
            if not name.endswith(suffix) or len(shape) != 2:
                continue
            if any(w is not None and w != got for w, got in zip(want, shape, strict=True)):
                shown_want = " x ".join("?" if w is None else str(w) for w in want)
                found.append(
                    f"tensor {name} is {shape[0]} x {shape[1]}, and config.json says {what} = "
                    f"{shown_want}: the weights and the config are of different models; give "
                    "the config.json saved with these weights"
                )
                break  # one tensor of a kind says it
    indices = {int(m.group(1)) for name in tensors if (m := _LAYER.search(name))}
    if layers is not None and indices and max(indices) + 1 != layers:
        found.append(
            f"the weights hold {max(indices) + 1} layers and config.json says "
            f"num_hidden_layers = {layers}: the weights and the config are of different models "
            "(or a shard is missing); give the config.json saved with these weights"
        )
    elif indices and len(indices) != max(indices) + 1:
        gone = sorted(set(range(max(indices) + 1)) - indices)
        found.append(
            f"the weights lack layers {', '.join(map(str, gone[:5]))} of 0..{max(indices)}: a "
            "shard is missing; copy the whole checkpoint"
        )
    return found


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
