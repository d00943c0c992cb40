"""Which dtype this CPU computes fastest in: bfloat16 where it runs bf16 math natively, float32
where bf16 is emulated.

A model kept in bf16 halves memory traffic, and on CPUs with bf16 instructions (AVX512-BF16,
AMX on Intel Xeon; the bf16 extensions on Arm) bf16 matrix products are also faster. On an
AVX2-only CPU (AMD EPYC without AVX-512) every bf16 product is converted to float32 and back, in
software: the same fresh clone's AWQ stage took 14 minutes there against 1.6 on a Xeon, the
machine probe 8.5 against 0.6. So the offline stages that only *compute* (the quantizers'
calibration passes) compute in float32 on such a CPU, and save what they always save; a server
whose ``dtype`` is ``native`` (:func:`serving_dtype`) is started in the same dtype.

The CPU flags are not trusted for this (some guests advertise what faults, and a flag says
nothing of the library's kernels): the probe times the same matrix product in both dtypes,
through torch, in this process, and picks bf16 only when it is not slower. ~0.2 s, once per
process; ``QUANTBENCH_COMPUTE_DTYPE`` (bfloat16 | float32) overrides it, and is what a child
process inherits from a parent that already probed.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

from quantbench import accelerator
from quantbench.errors import UserError

ENV = "QUANTBENCH_COMPUTE_DTYPE"
DTYPES = ("bfloat16", "float32")
# bf16 must be at least this fast relative to float32 to be chosen: a CPU that runs bf16 natively
# is 1.5-4x faster in it; emulation is 2-10x slower.
MIN_SPEEDUP = 1.0


@dataclass(frozen=True)
class DtypeProbe:
    """The chosen dtype and what decided it."""

    dtype: str
    bf16_s: float | None
    fp32_s: float | None
    source: str
    """'measured', or the environment variable that set it."""

    @property
    def note(self) -> str:
        if self.bf16_s is None or self.fp32_s is None:
            return f"{self.dtype} ({self.source})"
        return (
            f"{self.dtype}: a bf16 product took {self.bf16_s * 1e3:.1f} ms, float32 "
            f"{self.fp32_s * 1e3:.1f} ms here"
        )


def _time(
    dtype: object, m: int = 256, k: int = 512, n: int = 1536, reps: int = 12, cap_s: float = 0.2
) -> float:
    """The best of at most ``reps`` timings of one ``m x k`` by ``k x n`` product in ``dtype``,
    stopping once ``cap_s`` is spent (an emulated bf16 product took 157 ms, 130x float32)."""
    import torch

    a = torch.randn(m, k).to(dtype)  # type: ignore[arg-type]
    b = torch.randn(k, n).to(dtype)  # type: ignore[arg-type]
    a @ b  # warm the kernels up
    best, spent = float("inf"), 0.0
    for _ in range(reps):
        start = time.perf_counter()
        a @ b
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
        if spent >= cap_s:
            break
    return best


def _compare(rounds: int = 3) -> tuple[float, float]:
    """(bf16, float32) best times, the two measured in alternation so that another process
    sharing the cores slows both alike."""
    import torch

    bf16 = fp32 = float("inf")
    for _ in range(rounds):
        bf16 = min(bf16, _time(torch.bfloat16))
        fp32 = min(fp32, _time(torch.float32))
    return bf16, fp32


@functools.cache
def probe() -> DtypeProbe:
    """The dtype to compute in on this CPU (see the module docstring)."""
    forced = os.environ.get(ENV)
    if forced:
        if forced not in DTYPES:
            raise UserError(f"{ENV}={forced!r}: give one of {', '.join(DTYPES)}")
        return DtypeProbe(forced, None, None, f"set by {ENV}")
    measured = measure()
    os.environ[ENV] = measured.dtype  # children (quantizer workers, evaluation) decide the same
    return measured


def measure() -> DtypeProbe:
    """Time the product in both dtypes here and pick one: no environment, no cache."""
    bf16, fp32 = _compare()
    dtype = "bfloat16" if fp32 / bf16 >= MIN_SPEEDUP else "float32"
    return DtypeProbe(dtype, bf16, fp32, "measured")


def compute_dtype() -> str:
    """'bfloat16' or 'float32': what the offline stages compute in here."""
    return probe().dtype


NATIVE = "native"


def serving_dtype(requested: str, device: str = "cpu") -> str:
    """An engine's ``--dtype``: ``native`` is what this CPU computes fastest in (bf16 where it runs
    bf16 natively, float32 where bf16 is emulated); anything else is passed as given. A server
    computes every step in that dtype, so on an AVX2-only CPU a bf16 server converts every product
    in software (transformers' bf16 step at 4 streams there: 257 ms against 84 on a Xeon).

    On a GPU (``device`` ``cuda``, resolved) nothing is timed: ``native`` is bfloat16, which every
    GPU from compute capability 8.0 (Ampere) on computes natively, and float16 on older ones
    (a Volta or Turing has no bf16 tensor cores; vLLM refuses bf16 there)."""
    if requested != NATIVE:
        return requested
    if device == "cuda":
        return gpu_native_dtype()
    return compute_dtype()


def gpu_native_dtype() -> str:
    """bfloat16 where the first GPU's compute capability is 8.0 or more (or is not known),
    float16 below."""
    found = accelerator.detect().gpus
    cc = found[0].compute_capability if found else None
    if cc is not None and int(cc.split(".")[0]) < 8:
        return "float16"
    return "bfloat16"


def torch_dtype(name: str) -> object:
    import torch

    return {"bfloat16": torch.bfloat16, "float32": torch.float32}[name]
