"""This machine's GPU measured for the estimator: the ``calibrate`` stage where ``runtime.device``
resolves to cuda.

The CPU's probes (:mod:`quantbench.estimate.machine`) done on the GPU with torch, each the best
of a few repeats after a warm-up, timed by CUDA events:

* copy: a buffer far larger than the L2 cache copied device to device, read + write bytes
  counted (the STREAM convention): the bandwidth weights and the KV cache stream at;
* GEMM: a large square product in a linear layer's layout (``x @ w.T``) in bf16, and in int8
  (``torch._int_mm``) and fp8 (``torch._scaled_mm``, compute capability 8.9 and up) where this
  torch and GPU run them: the matrix rate;
* the model's own shapes: a prompt's tokens (:data:`PREFILL_TOKENS`) times each distinct weight
  matrix of a layer, in bf16: what the prefill reaches on the model's thinner products. (A CPU
  probes matrix-vector products at these shapes instead: its decode kernels are where it falls
  short of its copy rate; a GPU's shortfall is in its GEMMs.)

:func:`gpu_spec` (arithmetic only) turns the figures into the estimate's ``this``: the copy rate
is its bandwidth, the square products its matmul rates (a dtype not measured: its datasheet peak
scaled by bf16's measured share of its own), the shapes' rate over the square rate its compute
efficiency; its ``gpu`` keeps the probes, the datasheet entry the GPU's name matched
(:func:`quantbench.estimate.hardware.datasheet_name`) and the ratios measured / datasheet. A GPU
the table does not hold is estimated from its measurement alone, and its source says so.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from quantbench.accelerator import torch_device
from quantbench.estimate.hardware import (
    MEASURED_COMPUTE_EFFICIENCY,
    datasheet_name,
    table_entry,
)
from quantbench.schemas.hardware import GpuMeasurement, HardwareSpec, shape_key

if TYPE_CHECKING:
    from quantbench.accelerator import Accelerators, Gpu
    from quantbench.schemas.roofline import ModelShape

# Share of the measured device-to-device copy rate that decode kernels reach when they stream
# weights and KV blocks. Assumption: a copy reaches 85-90 % of an HBM part's peak, and the
# datasheet entries assume 80 % of peak for decode (DATASHEET_BANDWIDTH_EFFICIENCY): 0.9 of the
# copy says about the same of a measured GPU.
MEASURED_GPU_BANDWIDTH_EFFICIENCY = 0.9
COPY_BYTES = 1 << 30
"""1 GiB copied into another: 20x an H100's 50 MB L2 (and 8x a B200's 126 MB), so the copy
streams from device memory, not the cache."""
GEMM_SIZE = 8192
"""Square size of the GEMM probe: large enough for every tensor core to be busy (a few ms on an
H100), small enough for the smallest GPU's memory (three 128 MiB bf16 matrices)."""
PREFILL_TOKENS = 2048
"""Token rows of the shape probes: a long prompt's prefill, or a chunked one's chunk."""
REPEATS = 10


def _best_seconds(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """The fastest of ``repeats`` calls after one warm-up, timed on the GPU's own clock."""
    import torch

    fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def _copy_gbs(device: str) -> float:
    import torch

    src = torch.ones(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * COPY_BYTES / _best_seconds(lambda: dst.copy_(src)) / 1e9


def _gemm_tflops(device: str, n: int = GEMM_SIZE) -> dict[str, float]:
    """bf16, and int8 / fp8 where this torch and GPU have the kernel (each left out otherwise:
    the estimate then scales the datasheet's figure for it)."""
    import torch
    import torch.nn.functional as F

    flops = 2 * n**3
    x = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    w = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    out = {"bf16": flops / _best_seconds(lambda: F.linear(x, w)) / 1e12}
    try:
        a = torch.randint(-64, 64, (n, n), dtype=torch.int8, device=device)
        b = torch.randint(-64, 64, (n, n), dtype=torch.int8, device=device)
        out["int8"] = flops / _best_seconds(lambda: torch._int_mm(a, b.t())) / 1e12
    except (AttributeError, RuntimeError):
        pass  # no int8 tensor-core kernel in this build for this GPU
    if torch.cuda.get_device_capability(device) >= (8, 9) and hasattr(torch, "float8_e4m3fn"):
        try:
            a8, b8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
            one = torch.ones((), device=device)

            def fp8() -> object:  # b8.t(): the column-major second operand the kernel takes
                return torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                        out_dtype=torch.bfloat16)  # fmt: skip

            out["fp8"] = flops / _best_seconds(fp8) / 1e12
        except (AttributeError, RuntimeError, TypeError):
            pass
    return out


def _shape_tflops(
    device: str, shapes: list[tuple[int, int]], tokens: int = PREFILL_TOKENS
) -> dict[str, float]:
    """bf16 rate of ``tokens`` rows times each ``rows x cols`` weight (``x @ w.T``)."""
    import torch
    import torch.nn.functional as F

    out = {}
    for rows, cols in shapes:
        x = torch.randn(tokens, cols, dtype=torch.bfloat16, device=device)
        w = torch.randn(rows, cols, dtype=torch.bfloat16, device=device)
        out[shape_key(rows, cols)] = (
            2 * tokens * rows * cols / _best_seconds(lambda x=x, w=w: F.linear(x, w)) / 1e12
        )
    return out


@dataclass(frozen=True)
class GpuProbes:
    """What the probes measured (the GPU's figures before they become a spec)."""

    copy_gbs: float
    gemm_tflops: dict[str, float]
    shape_tflops: dict[str, float] = field(default_factory=dict)
    """bf16 rate per weight shape ('ROWSxCOLS') at ``prefill_tokens`` rows."""
    shape_weights: dict[str, float] = field(default_factory=dict)
    """Each shape's weights in a layer: how much of the prefill's FLOPs run at its rate."""
    prefill_tokens: int = PREFILL_TOKENS


def layer_shapes(arch: ModelShape) -> dict[str, float]:
    """A decoder layer's weight shapes ('ROWSxCOLS') and the weights of each: the prefill's
    products (the head computes the prompt's last token only)."""
    shapes: dict[str, float] = {}
    for tensor in arch.layer_tensors(0):
        key = shape_key(tensor.rows, tensor.cols)
        shapes[key] = shapes.get(key, 0.0) + tensor.elements
    return shapes


def shape_efficiency(probes: GpuProbes) -> float | None:
    """The model's products' rate over the square product's, weighted by FLOPs (a harmonic
    mean: times add up); None without shape probes."""
    square = probes.gemm_tflops.get("bf16")
    weights = {k: w for k, w in probes.shape_weights.items() if k in probes.shape_tflops}
    if not square or not weights:
        return None
    seconds = sum(w / probes.shape_tflops[k] for k, w in weights.items())
    return min(1.0, sum(weights.values()) / seconds / square)


def gpu_spec(
    found: Gpu,
    probes: GpuProbes,
    *,
    driver: str | None = None,
    torch_version: str = "",
    cuda_version: str | None = None,
    measured_at: str = "",
    seconds: float = 0.0,
) -> HardwareSpec:
    """This GPU as the estimate's ``this``, from its probes and its datasheet entry."""
    entry_name = datasheet_name(found.name, found.memory_mib)
    entry = table_entry(entry_name) if entry_name is not None else None
    measured = dict(probes.gemm_tflops)
    tflops = dict(measured)
    ratios = {}
    if entry is not None:
        ratios = {
            d: v / entry.matmul_tflops[d] for d, v in measured.items() if d in entry.matmul_tflops
        }
        scale = ratios.get("bf16")
        if scale is not None:  # a dtype not measured: its peak at bf16's measured share
            tflops.update(
                {d: v * scale for d, v in entry.matmul_tflops.items() if d not in measured}
            )
    efficiency = shape_efficiency(probes)
    if entry is not None:
        match = f"its datasheet entry {entry.name}"
    else:
        match = "no datasheet entry for this GPU: estimated from its calibration alone"
    return HardwareSpec(
        name=f"this ({found.name})",
        kind="gpu",
        memory_gb=found.memory_mib * 2**20 / 1e9,
        memory_bandwidth_gbs=probes.copy_gbs,
        matmul_tflops=tflops,
        compute_efficiency=efficiency or MEASURED_COMPUTE_EFFICIENCY,
        bandwidth_efficiency={"default": MEASURED_GPU_BANDWIDTH_EFFICIENCY},
        source=(
            f"measured on {found.name} ({match}) with torch {torch_version or '?'}, CUDA "
            f"{cuda_version or '?'}: device copy {probes.copy_gbs:.0f} GB/s, bf16 GEMM "
            f"{measured.get('bf16', 0):.0f} TFLOP/s"
            + ("" if efficiency else "; the model's shapes not probed: compute efficiency assumed")
        ),
        gpu=GpuMeasurement(
            gpu=found.name,
            uuid=found.uuid,
            memory_mib=found.memory_mib,
            compute_capability=found.compute_capability,
            driver=driver,
            datasheet=entry.name if entry is not None else None,
            copy_gbs=probes.copy_gbs,
            gemm_tflops=measured,
            gemm_shape_tflops={"bf16": dict(probes.shape_tflops)} if probes.shape_tflops else {},
            prefill_tokens=probes.prefill_tokens,
            bandwidth_ratio=(
                probes.copy_gbs / entry.memory_bandwidth_gbs if entry is not None else None
            ),
            matmul_ratio=ratios,
            torch_version=torch_version,
            cuda_version=cuda_version,
            measured_at=measured_at,
            seconds=seconds,
        ),
    )


def measure_gpu(arch: ModelShape, found: Accelerators) -> HardwareSpec:
    """Measure the first GPU of ``found`` for the model of shape ``arch`` (about ten seconds)."""
    import torch

    gpu = found.gpus[0]
    device = torch_device("cuda")
    started = time.perf_counter()
    shapes = layer_shapes(arch)
    dims = [(int(r), int(c)) for r, c in (key.split("x") for key in shapes)]
    probes = GpuProbes(
        copy_gbs=_copy_gbs(device),
        gemm_tflops=_gemm_tflops(device),
        shape_tflops=_shape_tflops(device, dims),
        shape_weights=shapes,
    )
    return gpu_spec(
        gpu, probes, driver=found.driver, torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        seconds=time.perf_counter() - started,
    )  # fmt: skip


def describe(measurement: GpuMeasurement) -> str:
    """One line: the GPU, its figures and how they stand against its datasheet."""
    bf16 = measurement.gemm_tflops.get("bf16", 0.0)
    against = (
        f" ({measurement.bandwidth_ratio:.2f} and {measurement.matmul_ratio.get('bf16', 0):.2f} "
        f"of the datasheet {measurement.datasheet}'s)"
        if measurement.datasheet is not None and measurement.bandwidth_ratio is not None
        else " (no datasheet entry: the calibration alone)"
    )
    figures = f"copy {measurement.copy_gbs:.0f} GB/s, bf16 GEMM {bf16:.0f} TFLOP/s"
    return f"{measurement.gpu}: {figures}{against}"
