"""The folder where this machine keeps what quantbench found once, for every clone and process.

``$QUANTBENCH_CACHE``, default ``~/.cache/quantbench``: the llama.cpp build
(`native/llama_build.py`), the vLLM kernel probe (`engines/vllm_kernels.py`), the model's
linear-layer names (`linear_names.py`). Each entry is keyed by what it depends on, so a cached entry is
never stale. Standard library only: the llama.cpp build imports it on the machine's own Python,
before any virtual environment exists.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "QUANTBENCH_CACHE"


def machine_cache_dir() -> Path:
    """``$QUANTBENCH_CACHE``, else ``~/.cache/quantbench`` (not created here)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "quantbench")
