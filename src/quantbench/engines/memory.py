"""Whether a server's settings fit this machine's memory, checked before it starts.

Settings that reserve memory (vLLM's KV-cache space, llama.cpp's context and KV-cache types, a
draft model, transformers' continuous-batching blocks) are added to the weights and held against
what the machine has available *now* (``MemAvailable``): a setting that cannot fit fails its
server point at once, with the figures and the fix, instead of swapping or being killed halfway
through a point. The figures are lower bounds (no activations, no runtime), so a pass is no
promise; a refusal is certain.

On a GPU (the engine's resolved ``device``), what the server holds there is apart
(:class:`GpuNeeds`: the weights and caches it puts on each GPU it spans) and held against the
memory of the GPUs :func:`quantbench.accelerator.detect` found, or the share of it the engine
confines itself to (vLLM's ``gpu_memory_utilization``); what stays in host memory (llama.cpp's
layers left on the CPU) is held against ``MemAvailable`` as on a CPU machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantbench import accelerator
from quantbench.formats.gguf import gguf_hparams
from quantbench.hfconfig import text_config

if TYPE_CHECKING:
    from quantbench.accelerator import Accelerators

GIB = 1 << 30
MIB = 1 << 20
# Bytes per element of llama.cpp's KV-cache types (block types: block bytes / 32 elements).
GGML_KV_BYTES = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
    "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32,
}  # fmt: skip

Need = tuple[int, str]
"""(bytes, what they are, naming the setting)."""


def available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """What the kernel says can be allocated without swapping (None where it does not say)."""
    return _meminfo("MemAvailable", meminfo)


def total_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The machine's memory in all (None where the kernel does not say): what no setting can
    exceed, whatever else runs (the preflight checks, before any work)."""
    return _meminfo("MemTotal", meminfo)


def _meminfo(field: str, meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def hf_kv_bytes_per_token(config: dict[str, Any], element_bytes: float) -> float:
    """K and V bytes one token holds across every layer, from a Hugging Face config."""

    text = text_config(config)
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    return 2 * int(text["num_hidden_layers"]) * kv_heads * head_dim * element_bytes


def gguf_kv_bytes_per_token(path: Path, cache_type_k: str, cache_type_v: str) -> float:
    """K and V bytes one token holds across every layer, from a GGUF file's metadata."""

    h = gguf_hparams(
        path, "block_count", "embedding_length", "attention.head_count", "attention.head_count_kv"
    )
    width = h["embedding_length"] // h["attention.head_count"] * h["attention.head_count_kv"]
    per_element = GGML_KV_BYTES[cache_type_k] + GGML_KV_BYTES[cache_type_v]
    return h["block_count"] * width * per_element


def shortfall(needs: Sequence[Need], engine: str, available: int | None = None) -> str | None:
    """Why these needs cannot fit in what is available now, or None when they can (or when the
    machine does not say what it has)."""
    have = available_bytes() if available is None else available
    total = sum(n for n, _ in needs)
    if have is None or total <= have:
        return None
    parts = " + ".join(f"{what} {n / GIB:.2f} GiB" for n, what in needs)
    return (
        f"{engine}: these settings need at least {total / GIB:.2f} GiB ({parts}), and this "
        f"machine has {have / GIB:.2f} GiB available now; lower the setting that reserves the "
        "most, or stop what else is using the memory"
    )


@dataclass(frozen=True)
class GpuNeeds:
    """What a server holds on each GPU it uses, at the least (its weights and caches there)."""

    needs: tuple[Need, ...]
    """(bytes on each GPU, what: naming the setting that puts them there)."""
    gpus: tuple[int, ...] = (0,)
    """The GPUs it spans (indices): tensor parallel ranks and replicas, llama.cpp's split."""
    share: float = 1.0
    """The part of each GPU's memory the server confines itself to (1: all of it)."""
    share_setting: str | None = None
    """The setting that says so (``engines.vllm.gpu_memory_utilization``)."""
    fix: str = "serve a smaller variant, or on the CPU (device: cpu)"
    """What to change where they do not fit."""


def gpu_shortfall(gpu: GpuNeeds, engine: str, found: Accelerators | None = None) -> str | None:
    """Why these GPU needs cannot fit in the GPUs found (each one's memory, or the share of it
    the settings allow), or None when they can (or when no GPU is found to say)."""
    if found is None:
        found = accelerator.detect()
    if not found.gpus:
        return None
    memory = {g.index: g for g in found.gpus}
    absent = [i for i in gpu.gpus if i not in memory]
    if absent:
        return (
            f"{engine}: these settings span {len(gpu.gpus)} GPUs, and this machine has "
            f"{len(found.gpus)} ({found.describe()}); {gpu.fix}"
        )
    smallest = min((memory[i] for i in gpu.gpus), key=lambda g: g.memory_mib)
    have = smallest.memory_mib * MIB
    budget = int(have * gpu.share)
    total = sum(n for n, _ in gpu.needs)
    if total <= budget:
        return None
    parts = " + ".join(f"{what} {n / GIB:.2f} GiB" for n, what in gpu.needs)
    has = (
        f"{gpu.share_setting} {gpu.share:g} leaves it {budget / GIB:.2f} GiB of the "
        f"{smallest.name}'s {have / GIB:.2f} GiB"
        if gpu.share_setting is not None and gpu.share < 1
        else f"the {smallest.name} has {have / GIB:.2f} GiB"
    )
    each = " on each GPU" if len(gpu.gpus) > 1 else ""
    return (
        f"{engine}: these settings need at least {total / GIB:.2f} GiB of GPU memory{each} "
        f"({parts}), and {has}; {gpu.fix}"
    )
