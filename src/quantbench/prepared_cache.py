"""The embedded model prepared once per machine, for the tests and the fault catalogue.

Preparing the shipped GGUF as a Hugging Face folder takes 30-60 s on 2 cores, and `make test`'s
pytest processes (two workers, then the timing phase) and `make faults`' vLLM rows each need it.
The first caller prepares it into the machine's cache (``$QUANTBENCH_CACHE``, default
``~/.cache/quantbench``) under a key of everything it depends on, while the others wait on a
lock; a cached copy is never stale. The pipeline itself does not use this: its prepare stage
writes ``models/base`` under DVC.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from pathlib import Path

from quantbench.config import ModelSettings
from quantbench.machine_cache import machine_cache_dir
from quantbench.model import embedded_gguf_path, prepare_base
from quantbench.runtime import configure_threads

PACKAGE = Path(__file__).resolve().parent


def prepared_key() -> str:
    """What the prepared base depends on: the shipped GGUF, the library's code, the versions of
    torch and transformers. Any change makes another key."""
    import torch
    import transformers

    digest = hashlib.sha256(f"{torch.__version__} {transformers.__version__}".encode())
    gguf = embedded_gguf_path()
    digest.update(f"{gguf.name} {gguf.stat().st_size} {gguf.stat().st_mtime_ns}".encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def shared_prepared_base() -> Path:
    """The machine's prepared copy of the embedded model (made here on first use). Read it, do
    not write into it: callers that modify a model copy it first."""
    shared = machine_cache_dir() / "test-prepared-base" / prepared_key()
    shared.parent.mkdir(parents=True, exist_ok=True)
    with open(shared.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "model_info.json").is_file():
            configure_threads(1)
            building = shared.with_name(f"{shared.name}.tmp-{os.getpid()}")
            shutil.rmtree(building, ignore_errors=True)
            building.mkdir()
            prepare_base(ModelSettings(), building)
            building.rename(shared)
    return shared
