"""Hardware descriptions: datasheet GPUs with their sources, the entry of a GPU found here (its
driver's name matched to the table), and measured CPUs.

Every GPU figure is the vendor's dense peak (the "with sparsity" figures halved), per compute
dtype. Peaks are never reached; the efficiency factors below scale them and are named,
documented parameters that ``quantbench estimate`` reports with every result and that
:mod:`quantbench.estimate.compare` fits from measurements. CPUs are not tabulated: their
figures come from measuring the machine (``--hardware this``, see
:mod:`quantbench.estimate.machine`); a GPU found here is measured too, beside its entry
(:mod:`quantbench.estimate.gpu`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from quantbench.accelerator import detect
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.roofline import Rates
from quantbench.schemas.hardware import HardwareSpec

if TYPE_CHECKING:
    from quantbench.accelerator import Gpu

# Fraction of a datasheet's dense tensor peak that serving engines reach on the large GEMMs
# of prefill. Assumption: published vLLM/TensorRT-LLM prefill runs sit at roughly 50-70 %
# model FLOP utilisation on H100/A100-class parts; 0.6 is the middle.
DATASHEET_COMPUTE_EFFICIENCY = 0.6
# Fraction of a datasheet's memory bandwidth that weight/KV streaming kernels reach.
# Assumption: STREAM-like copies reach 80-90 % of HBM/GDDR peak; decode kernels a bit less.
DATASHEET_BANDWIDTH_EFFICIENCY = 0.8
# Fraction of a measured CPU's large-GEMM probe throughput that a model's smaller GEMMs
# reach (the probe is a square 2048 product; model shapes are thinner). Assumption.
MEASURED_COMPUTE_EFFICIENCY = 0.8
# Fraction of a measured CPU's copy bandwidth reached by kernels that were not probed and have
# no engine entry (engines.py holds llama.cpp's). Dtypes whose matrix-vector product was probed
# use the measured rates instead. Assumption.
MEASURED_UNPROBED_BANDWIDTH_EFFICIENCY = 0.8
# Compute dtype used when a hardware entry has no figure for the one a format needs.
FALLBACK_COMPUTE_DTYPE = "bf16"


def hardware_rates(
    hardware: HardwareSpec,
    compute_dtype: str,
    compute_efficiency: float | None = None,
    bandwidth_efficiency: float | None = None,
    step_overhead_ms: float = 0.0,
    shape_bytes: dict[tuple[int, int], float] | None = None,
) -> Rates:
    """Effective machine rates of ``hardware`` for a format computing in ``compute_dtype``.

    Explicit efficiencies override the entry's; ``None`` keeps the entry's. ``shape_bytes``
    (streamed weight bytes per matrix shape) refines measured CPUs.
    """
    notes: list[str] = []
    dtype = compute_dtype
    if dtype not in hardware.matmul_tflops:
        notes.append(f"{hardware.name} has no {dtype} matmul figure; {FALLBACK_COMPUTE_DTYPE} used")
        dtype = FALLBACK_COMPUTE_DTYPE
    bw_eff = bandwidth_efficiency or hardware.streaming_efficiency(compute_dtype, shape_bytes)
    return Rates(
        compute_dtype=dtype,
        peak_flops=hardware.matmul_tflops[dtype] * 1e12,
        peak_bandwidth=hardware.memory_bandwidth_gbs * 1e9,
        compute_efficiency=compute_efficiency or hardware.compute_efficiency,
        bandwidth_efficiency=bw_eff,
        step_overhead_s=step_overhead_ms / 1e3,
        notes=tuple(notes),
    )


def _datasheet_gpu(
    name: str,
    memory_gb: float,
    bandwidth_gbs: float,
    tflops: dict[str, float],
    source: str,
) -> HardwareSpec:
    return HardwareSpec(
        name=name,
        kind="gpu",
        memory_gb=memory_gb,
        memory_bandwidth_gbs=bandwidth_gbs,
        matmul_tflops=tflops,
        compute_efficiency=DATASHEET_COMPUTE_EFFICIENCY,
        bandwidth_efficiency={"default": DATASHEET_BANDWIDTH_EFFICIENCY},
        source=source,
    )


_SPARSITY_NOTE = "dense figures (the datasheet's 'with sparsity' values halved)"

# Datasheet GPUs, keyed by upper-case name. Tensor-core peaks for bf16/fp16/fp8/int8; fp32 is
# the non-tensor peak.
GPU_TABLE: dict[str, HardwareSpec] = {
    spec.name.upper(): spec
    for spec in (
        _datasheet_gpu(
            "H100",
            80,
            3350,
            {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "int8": 1978.9, "fp32": 66.9},
            f"NVIDIA H100 datasheet, SXM5 80 GB, {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/h100/",
        ),
        _datasheet_gpu(
            "H100-PCIe",
            80,
            2000,
            {"bf16": 756.5, "fp16": 756.5, "fp8": 1513.0, "int8": 1513.0, "fp32": 51.2},
            f"NVIDIA H100 datasheet, PCIe 80 GB, {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/h100/",
        ),
        _datasheet_gpu(
            "H100-NVL",
            94,
            3900,
            {"bf16": 835.5, "fp16": 835.5, "fp8": 1670.5, "int8": 1670.5, "fp32": 60.0},
            f"NVIDIA H100 datasheet, NVL 94 GB (one GPU of the pair), {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/h100/",
        ),
        _datasheet_gpu(
            "H200",
            141,
            4800,
            {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "int8": 1978.9, "fp32": 67.0},
            f"NVIDIA H200 datasheet, SXM 141 GB, {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/h200/",
        ),
        _datasheet_gpu(
            "A100",
            80,
            2039,
            {"bf16": 312.0, "fp16": 312.0, "int8": 624.0, "fp32": 19.5},
            f"NVIDIA A100 datasheet, SXM4 80 GB (no fp8), {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/a100/",
        ),
        _datasheet_gpu(
            "A100-40GB",
            40,
            1555,
            {"bf16": 312.0, "fp16": 312.0, "int8": 624.0, "fp32": 19.5},
            f"NVIDIA A100 datasheet, SXM4 40 GB (no fp8), {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/a100/",
        ),
        _datasheet_gpu(
            "A100-PCIe",
            80,
            1935,
            {"bf16": 312.0, "fp16": 312.0, "int8": 624.0, "fp32": 19.5},
            f"NVIDIA A100 datasheet, PCIe 80 GB (no fp8), {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/a100/",
        ),
        _datasheet_gpu(
            "L40S",
            48,
            864,
            {"bf16": 362.05, "fp16": 362.05, "fp8": 733.0, "int8": 733.0, "fp32": 91.6},
            f"NVIDIA L40S datasheet, {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/l40s/",
        ),
        _datasheet_gpu(
            "L40",
            48,
            864,
            {"bf16": 181.05, "fp16": 181.05, "fp8": 362.05, "int8": 362.05, "fp32": 90.5},
            f"NVIDIA L40 datasheet, {_SPARSITY_NOTE}: https://www.nvidia.com/en-us/data-center/l40/",
        ),
        _datasheet_gpu(
            "L4",
            24,
            300,
            {"bf16": 121.0, "fp16": 121.0, "fp8": 242.5, "int8": 242.5, "fp32": 30.3},
            f"NVIDIA L4 datasheet, {_SPARSITY_NOTE}: https://www.nvidia.com/en-us/data-center/l4/",
        ),
        _datasheet_gpu(
            "A10G",
            24,
            600,
            {"bf16": 70.0, "fp16": 70.0, "int8": 140.0, "fp32": 35.0},
            "AWS publishes no A10G datasheet; figures as compiled by Baseten (dense, no fp8): "
            "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/",
        ),
        _datasheet_gpu(
            "A10",
            24,
            600,
            {"bf16": 125.0, "fp16": 125.0, "int8": 250.0, "fp32": 31.2},
            f"NVIDIA A10 datasheet (no fp8), {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
        ),
        _datasheet_gpu(
            "B200",
            180,
            8000,
            {"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0, "int8": 4500.0, "fp32": 80.0},
            f"NVIDIA HGX B200 (1000 W) figures per GPU (8-GPU totals / 8), {_SPARSITY_NOTE}: "
            "https://www.nvidia.com/en-us/data-center/hgx/",
        ),
    )
}
# Other names of table entries (upper case): the form a cloud's instance list gives.
ALIASES = {"H100-SXM": "H100", "H100-SXM5": "H100", "A100-SXM": "A100", "A100-80GB": "A100"}
THIS_MACHINE = "this"


def table_entry(name: str) -> HardwareSpec | None:
    """The table's entry of ``name`` or of one of its aliases (any case), a copy; None: none."""
    key = name.upper()
    spec = GPU_TABLE.get(ALIASES.get(key, key))
    return spec.model_copy(deep=True) if spec is not None else None


def datasheet_name(gpu_name: str, memory_mib: int = 0) -> str | None:
    """The table entry of a GPU as its driver names it (NVML, ``nvidia-smi``), or None for a GPU
    the table does not hold.

    The driver's names are not the datasheets': an H100 SXM says "NVIDIA H100 80GB HBM3", a
    PCIe card "NVIDIA H100 PCIe", an A100 "NVIDIA A100-SXM4-80GB" or "NVIDIA A100-PCIE-40GB".
    They are matched by whole words, so a GH200 is not taken for an H200; the memory found tells
    the 40 GB A100 from the 80 GB one (the name's own "80GB" where the memory is not known).
    """
    words = {w for w in re.split(r"[^0-9A-Z]+", gpu_name.upper()) if w}
    pcie = "PCIE" in words
    if "H100" in words:
        return "H100-NVL" if "NVL" in words else "H100-PCIe" if pcie else "H100"
    if "H200" in words:
        return None if "NVL" in words else "H200"  # the H200 NVL's peaks are not the SXM's
    if "A100" in words:
        large = memory_mib > 60 * 1024 if memory_mib else "80GB" in words
        return ("A100-PCIe" if pcie else "A100") if large else "A100-40GB"
    return next((f for f in ("L40S", "L40", "L4", "A10G", "A10", "B200") if f in words), None)


def this_gpu(device: str) -> Gpu | None:
    """The GPU ``this`` is where ``device`` (``runtime.device`` resolved) is cuda: the first one
    found (one process, one GPU); None: the CPU."""
    found = detect()
    return found.gpus[0] if device == "cuda" and found.has_gpu else None


def known_hardware() -> list[str]:
    """Names accepted by :func:`quantbench.estimate.lookup.resolve_hardware` (besides a path to a saved JSON)."""
    return [THIS_MACHINE, *(spec.name for spec in GPU_TABLE.values())]


def check_hardware_name(name: str) -> str:
    """Raise a clear error unless ``name`` is a table entry, ``this``, or a saved JSON file."""
    if name.lower() == THIS_MACHINE or table_entry(name) is not None:
        return name
    if name.endswith(".json"):
        return name
    raise EstimateInputError(
        f"hardware {name!r} is not known; use one of {known_hardware()} "
        "or the path of a saved hardware JSON"
    )
