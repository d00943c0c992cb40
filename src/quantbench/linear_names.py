"""The names of a model's linear layers (what LoRA's `target_modules` may name), found from its
config alone and kept once per model and machine.

Apart from `quantbench.model` because only `quantbench validate` asks, and its cache's key reaches
the machine's cache folder: the prepare stage, which imports `quantbench.model`, stays small.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from quantbench.machine_cache import machine_cache_dir
from quantbench.model import ModelSettings, embedded_gguf_path

log = logging.getLogger(__name__)


def linear_layer_names(settings: ModelSettings) -> set[str] | None:
    """The names (last component) of the model's linear layers, from its config alone: the model
    is built on torch's meta device, so no weight is read or allocated (seconds, mostly
    importing transformers and parsing a GGUF's metadata; once per model and machine, then read
    from ``$QUANTBENCH_CACHE/linear-names``). None where the model is not on this machine yet
    (a hub id)."""
    if settings.source == "local" and settings.path is not None:
        return _linear_names(
            "local", str(Path(settings.path).resolve()), settings.trust_remote_code
        )
    return _linear_names(settings.source, None, settings.trust_remote_code)


def _names_cache_file(source: str, path: str | None, trust_remote_code: bool) -> Path | None:
    """The cache file for these names, under a key of everything they depend on (the model's
    GGUF file or config.json, and the transformers version); None where that cannot be known
    (remote code, a hub id). Kept because building the embedded model's config makes
    transformers parse the whole GGUF, vocabulary included (15 to 25 s of every `quantbench
    validate` on an AVX2-only EPYC, with transformers' import), for the same answer every time."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    if trust_remote_code:  # the model's own code decides, and it is not hashed here
        return None
    try:
        key = f"{source} transformers {version('transformers')}"
    except PackageNotFoundError:
        return None
    if source == "embedded":
        gguf = embedded_gguf_path()
        key += f" {gguf} {gguf.stat().st_size} {gguf.stat().st_mtime_ns}"
    elif source == "local" and path is not None and (Path(path) / "config.json").is_file():
        key += " " + (Path(path) / "config.json").read_text()
    else:
        return None
    return (
        machine_cache_dir()
        / "linear-names"
        / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
    )


@functools.cache
def _linear_names(source: str, path: str | None, trust_remote_code: bool) -> set[str] | None:
    import json
    import os

    cache = _names_cache_file(source, path, trust_remote_code)
    if cache is not None and cache.is_file():
        try:
            return set(json.loads(cache.read_text()))
        except (OSError, ValueError):
            pass  # unreadable: found again and rewritten below
    names = _names_from_config(source, path, trust_remote_code)
    if cache is not None and names is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
            partial.write_text(json.dumps(sorted(names)))
            partial.replace(cache)
        except OSError as exc:  # a read-only home: the answer stands, only the next is slower
            log.debug("linear layer names not cached (%s)", exc)
    return names


def _names_from_config(source: str, path: str | None, trust_remote_code: bool) -> set[str] | None:
    # importing transformers logs torch's deprecation notes on some optional packages' enums,
    # and torchao that its CUDA kernels do not load on a CPU: noise in `quantbench validate`'s
    # answer, not the user's concern
    for noisy in ("torch.utils._pytree", "torchao"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if source == "embedded":
        gguf = embedded_gguf_path()
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    elif source == "local" and path is not None:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    else:
        return None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
    }
