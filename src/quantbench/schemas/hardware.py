"""Parts of the machine profile (``schemas.machine``) that the engines measure and declare.

An engine's per-step overhead is measured by the engine itself (its ``measure_overhead``) and
stored in the machine profile beside the CPU's figures, so it is a schema part, below both the
engines that write it and the estimator that reads it. A GPU's measurement
(:class:`GpuMeasurement`) sits in the same spec, beside the datasheet entry it matched.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EngineOverhead(BaseModel):
    """Fixed cost per forward step of a serving engine, measured on this machine.

    ``per_step_ms + layers * per_layer_ms`` is what a step costs beyond its roofline time:
    Python, op dispatch, sampling. Measured with a tiny model whose matmuls cost nothing.
    """

    model_config = ConfigDict(extra="forbid")

    per_layer_ms: float = Field(ge=0)
    per_step_ms: float = Field(ge=0)
    version: str = Field(description="engine (library) version measured")
    method: str


class CpuMeasurement(BaseModel):
    """What measuring a CPU found, kept beside the figures derived from it."""

    model_config = ConfigDict(extra="forbid")

    threads: int = Field(ge=1, description="torch threads used by every probe")
    copy_gbs: float = Field(gt=0, description="large-buffer copy, (read + write) bytes / s")
    read_gbs: float = Field(gt=0, description="large-buffer read-only reduction, bytes / s")
    gemv_gbs: dict[str, dict[int, float]] = Field(
        description="matrix-vector product over a matrix larger than the caches, weight bytes/s, "
        "per dtype and row length (input features)"
    )
    gemv_shape_gbs: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="matrix-vector products over many distinct matrices of one shape "
        "('ROWSxCOLS'), weight bytes/s per dtype: a model's own shapes, per-call costs included",
    )
    gemm_tflops: dict[str, float] = Field(description="large square product, best repeat")
    engine_overheads: dict[str, EngineOverhead] = Field(
        default_factory=dict, description="per engine, added when an estimate first needs it"
    )
    load_average: float = Field(description="1-minute load average when measured")
    cpu_model: str
    torch_version: str
    measured_at: str
    seconds: float = Field(description="how long the measurement took")


class GpuMeasurement(BaseModel):
    """What measuring this machine's GPU found (the calibrate stage on cuda), beside the
    datasheet entry the GPU's name matched and how far the measurement is from it."""

    model_config = ConfigDict(extra="forbid")

    gpu: str = Field(description="the GPU's name as its driver gives it (NVML, nvidia-smi)")
    uuid: str | None = None
    memory_mib: int = Field(ge=0, description="its memory, as the driver reports it")
    compute_capability: str | None = None
    driver: str | None = None
    datasheet: str | None = Field(
        description="the table entry the name matched (None: no entry; the calibration alone)"
    )
    copy_gbs: float = Field(gt=0, description="device-to-device copy, (read + write) bytes / s")
    gemm_tflops: dict[str, float] = Field(
        description="large square product per dtype, best repeat (bf16; int8 and fp8 where "
        "this torch and GPU run them)"
    )
    gemm_shape_tflops: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="products of a prompt's tokens ('prefill_tokens') with each of the model's "
        "own weight shapes ('ROWSxCOLS'), per dtype",
    )
    prefill_tokens: int = Field(ge=1, description="the token rows of the shape products")
    bandwidth_ratio: float | None = Field(
        description="copy_gbs over the datasheet's bandwidth (None: no datasheet entry)"
    )
    matmul_ratio: dict[str, float] = Field(
        default_factory=dict, description="gemm_tflops over the datasheet's dense peak, per dtype"
    )
    torch_version: str
    cuda_version: str | None = Field(description="the CUDA runtime torch was built with")
    measured_at: str
    seconds: float = Field(description="how long the measurement took")


class HardwareSpec(BaseModel):
    """Peak figures of one device and the efficiencies applied to them."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["gpu", "cpu"]
    memory_gb: float = Field(gt=0, description="device memory (GPU) or RAM (CPU), 1e9 bytes")
    memory_bandwidth_gbs: float = Field(gt=0, description="peak (GPU) or copy (CPU), 1e9 B/s")
    matmul_tflops: dict[str, float] = Field(description="dense peak per compute dtype, 1e12/s")
    compute_efficiency: float = Field(gt=0, le=1)
    bandwidth_efficiency: dict[str, float] = Field(
        description="per compute dtype, with a 'default' entry for the others"
    )
    source: str = Field(description="where the figures come from")
    measurement: CpuMeasurement | None = None
    gpu: GpuMeasurement | None = Field(
        None, description="this machine's GPU as measured (None: a datasheet entry, or a CPU)"
    )

    def gemv_rate(self, compute_dtype: str, rows: int, cols: int) -> float | None:
        """Measured GEMV streaming rate (GB/s) for a shape, or None if not probed.

        An exact shape probe wins; otherwise the row-length probes are interpolated.
        """
        if self.measurement is None:
            return None
        exact = self.measurement.gemv_shape_gbs.get(compute_dtype, {}).get(shape_key(rows, cols))
        if exact is not None:
            return exact
        by_length = self.measurement.gemv_gbs.get(compute_dtype)
        return interpolate_log2(by_length, cols) if by_length else None

    def streaming_efficiency(
        self, compute_dtype: str, shape_bytes: dict[tuple[int, int], float] | None = None
    ) -> float:
        """Bandwidth efficiency of weight streaming in ``compute_dtype``.

        Where GEMV probes measured this dtype, each shape's rate is weighted by the bytes the
        model streams in that shape (a harmonic mean, as times add up) and divided by the
        copy bandwidth. Otherwise the table's factor.
        """
        by_length = self.measurement.gemv_gbs.get(compute_dtype) if self.measurement else None
        if not by_length:
            return self.bandwidth_efficiency.get(
                compute_dtype, self.bandwidth_efficiency["default"]
            )
        if not shape_bytes:
            shape_bytes = {(max(by_length), max(by_length)): 1.0}
        seconds = 0.0
        for (rows, cols), nbytes in shape_bytes.items():
            rate = self.gemv_rate(compute_dtype, rows, cols)
            assert rate is not None  # the row-length probes exist for this dtype
            seconds += nbytes / rate
        return min(1.0, sum(shape_bytes.values()) / seconds / self.memory_bandwidth_gbs)


def shape_key(rows: int, cols: int) -> str:
    """How a matrix shape is keyed in measurements: ``"ROWSxCOLS"``."""
    return f"{rows}x{cols}"


def interpolate_log2(points: dict[int, float], x: float) -> float:
    """Piecewise-linear interpolation in log2(x), clamped to the end points."""
    xs = sorted(points)
    if x <= xs[0]:
        return points[xs[0]]
    if x >= xs[-1]:
        return points[xs[-1]]
    for lo, hi in itertools.pairwise(xs):
        if lo <= x <= hi:
            t = (math.log2(x) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
            return points[lo] + t * (points[hi] - points[lo])
    raise AssertionError("unreachable: x lies within the probed range")
