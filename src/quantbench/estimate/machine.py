"""Measure this machine (``--hardware this``) and cache the figures.

Three probes, each repeated and the best repeat kept (the least disturbed by other load;
a busy machine still reads low, so the load average is recorded beside the figures):

* copy: a buffer several times the last-level cache copied into another, counted as read +
  write bytes (the STREAM convention): the machine's memory bandwidth;
* GEMV: a matrix larger than the caches times one vector, per dtype and per row length: the
  rate at which the library's decode kernels actually stream weights. On CPUs it is often
  well below the copy rate and falls for short rows and small matrices, so when a model is
  known its own shapes are probed too (:func:`with_shape_probes`: many distinct matrices of
  one shape, per-call costs included) and weighted by the bytes it streams in each;
* GEMM: a large square product per dtype in the layout of a linear layer (``x @ w.T``; bf16 and
  fp32 through torch, int8 through ``torch._int_mm`` where this torch has it): the matrix
  throughput.

Figures depend on the thread count, so the cache keeps one entry per thread count, in
``<cache_dir>/hardware-<hostname hash>.json``. The whole measurement takes a few seconds.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import platform
import socket
import time
from collections.abc import Callable
from pathlib import Path

from quantbench.estimate.hardware import (
    MEASURED_COMPUTE_EFFICIENCY,
    MEASURED_UNPROBED_BANDWIDTH_EFFICIENCY,
)
from quantbench.fsutil import write_json
from quantbench.native.isa import advertised_cpu
from quantbench.schemas.hardware import CpuMeasurement, HardwareSpec, shape_key

DEFAULT_CACHE_DIR = Path("~/.cache/quantbench")
# Copy buffers must stream from DRAM: at least this many bytes and 8x the last-level cache, but
# no more than COPY_BUFFER_MAX_BYTES, which no CPU's cache holds. A cloud guest reports its host's
# whole L3 (480 MiB on a 2-core Xeon guest): 8x was 3.75 GiB buffers, 12.7 s of the calibrate
# stage, for the rate 2x gave in 1.9 s (copy 11.3 GB/s at 8x, 12.5 at 2x, 12.8 at 1x).
COPY_BUFFER_MIN_BYTES = 256 * 2**20
COPY_BUFFER_MAX_BYTES = 2 * 2**30
LLC_MULTIPLE = 8
# Assumed last-level cache size when sysfs does not say.
DEFAULT_LLC_BYTES = 32 * 2**20
# GEMV matrices: twice the last-level cache each, rows of these lengths (input features),
# spanning small (576, 1024) to large (4096+) models' hidden sizes.
GEMV_ROW_LENGTHS = (512, 1024, 2048, 4096)
# Square GEMM size: large enough to run at full speed, small enough for well under a second.
GEMM_SIZE = 2048
# Repeats per probe (after one warm-up); the best is kept.
REPEATS = 5
# A probe's repeats stop at this many seconds: on a CPU that emulates bf16 or has no int8 kernel
# (an AVX2-only EPYC) one call can take seconds, and five of each made the calibrate stage take
# 8.5 minutes against 0.6 on a Xeon. The warm-up call tells how many fit.
PROBE_BUDGET_S = 1.5
# A square GEMM grows from this size while one product takes under GEMM_GROW_S, up to GEMM_SIZE:
# large enough to run at full speed where the CPU is fast, no longer than needed where it is not.
GEMM_START = 512
GEMM_GROW_S = 0.05
# Bumped when the probes change, so stale cache entries are measured again.
# 2: repeats within a time budget, GEMM sized to the CPU; 3: GEMM in the linear layers' layout;
# 4: copy buffers capped at COPY_BUFFER_MAX_BYTES
PROBE_VERSION = 4


def _llc_bytes() -> int:
    """Size of the largest CPU cache sysfs reports, or the default."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=DEFAULT_LLC_BYTES)


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (else what platform knows)."""
    model = advertised_cpu().model
    return model if model is not None else platform.processor() or platform.machine()


def _best_seconds(
    fn: Callable[[], object], repeats: int = REPEATS, budget_s: float = PROBE_BUDGET_S
) -> float:
    start = time.perf_counter()
    fn()  # warm-up: page faults, kernel selection
    first = time.perf_counter() - start
    # as many repeats as fit the budget (at least one): a slow call is its own best estimate
    repeats = max(1, min(repeats, int(budget_s / first) if first > 0 else repeats))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


_TORCH_DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
PROBED_GEMV_DTYPES = tuple(_TORCH_DTYPES)


def _gemv_gbs(dtype_name: str, cols: int, llc: int) -> float:
    """Weight bytes/s of a matrix-vector product with rows of ``cols`` inputs."""
    import torch

    dtype = getattr(torch, _TORCH_DTYPES[dtype_name])
    itemsize = torch.empty((), dtype=dtype).element_size()
    weight = torch.ones(max(1, 2 * llc // (cols * itemsize)), cols, dtype=dtype)
    vector = torch.ones(1, cols, dtype=dtype)
    seconds = _best_seconds(lambda: torch.nn.functional.linear(vector, weight))
    return weight.numel() * itemsize / seconds / 1e9


MAX_PROBE_CALLS = 2048
"""Most matrices one shape probe cycles through. Filling twice the last-level cache with 8x16
matrices took 800,000 calls a pass (minutes); long before that a pass is bound by each call's
dispatch, not its bytes, so the rate it measures is the same. A model's real shapes (576x576
bf16 is 0.66 MB) need a few hundred even on a 256 MB cache, so the cap leaves them alone."""


def probe_count(rows: int, cols: int, itemsize: int, llc: int) -> int:
    """How many distinct ``rows x cols`` matrices one probe pass cycles through: enough to fill
    twice the last-level cache, at most :data:`MAX_PROBE_CALLS`."""
    return max(1, min(MAX_PROBE_CALLS, math.ceil(2 * llc / (rows * cols * itemsize))))


def _gemv_shape_gbs(dtype_name: str, rows: int, cols: int, llc: int) -> float:
    """Weight bytes/s of one vector times each of many distinct ``rows x cols`` matrices.

    Enough matrices to fill twice the last-level cache, so every pass streams from memory
    as a model's layers do, and every call pays its own dispatch cost as a model's do
    (:func:`probe_count`).
    """
    import torch

    dtype = getattr(torch, _TORCH_DTYPES[dtype_name])
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = probe_count(rows, cols, itemsize, llc)
    weights = [torch.ones(rows, cols, dtype=dtype) for _ in range(count)]
    vector = torch.ones(1, cols, dtype=dtype)

    def one_pass() -> None:
        for weight in weights:
            torch.nn.functional.linear(vector, weight)

    return count * rows * cols * itemsize / _best_seconds(one_pass) / 1e9


def copy_buffer_bytes(llc: int) -> int:
    """The copy probe's buffer for a last-level cache of ``llc`` bytes (the constants above)."""
    return min(COPY_BUFFER_MAX_BYTES, max(COPY_BUFFER_MIN_BYTES, LLC_MULTIPLE * llc))


def _copy_and_read_gbs(buffer_bytes: int) -> tuple[float, float]:
    """(copy rate counting read + write, read-only rate) over ``buffer_bytes`` buffers."""
    import torch

    src = torch.ones(buffer_bytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy_s = _best_seconds(lambda: dst.copy_(src))
    read_s = _best_seconds(lambda: src.sum())
    nbytes = src.numel() * 4
    return 2 * nbytes / copy_s / 1e9, nbytes / read_s / 1e9


def gemm_size(product: Callable[[int], Callable[[], object]]) -> int:
    """The square size to time a product at: doubled from GEMM_START while one product takes
    under GEMM_GROW_S, at most GEMM_SIZE (``product(n)`` returns the call for size ``n``)."""
    n = GEMM_START
    while n < GEMM_SIZE:
        call = product(n)
        call()  # first call: kernel selection, page faults
        start = time.perf_counter()
        call()
        if time.perf_counter() - start >= GEMM_GROW_S:
            break
        n *= 2
    return n


def _gemm_tflops(dtype_name: str) -> float:
    import torch

    dtype = getattr(torch, _TORCH_DTYPES[dtype_name])

    def product(n: int) -> Callable[[], object]:
        # in the layout every linear layer multiplies in (x @ w.T, weights stored out x in), not
        # `a @ b`: where bf16 is emulated (an AVX2-only EPYC, torch 2.13) the two take different
        # kernels, 4.1 against 1.4 GFLOP/s, and the square `a @ b` made the estimate of a bf16
        # model's decode step 2.8x too slow against a generate loop measured beside it
        x, w = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        return lambda: torch.nn.functional.linear(x, w)

    n = gemm_size(product)
    return 2 * n**3 / _best_seconds(product(n)) / 1e12


def _int8_gemm_tflops() -> float | None:
    """int8 x int8 -> int32 product rate, or None where this torch has no CPU kernel."""
    import torch

    int_mm = getattr(torch, "_int_mm", None)
    if int_mm is None:
        return None

    def product(n: int) -> Callable[[], object]:
        a = torch.randint(-64, 64, (n, n), dtype=torch.int8)
        b = torch.randint(-64, 64, (n, n), dtype=torch.int8)
        return lambda: int_mm(a, b)

    try:
        n = gemm_size(product)
        seconds = _best_seconds(product(n))
    except RuntimeError:
        return None  # formats computing in int8 then fall back to the bf16 figure
    return 2 * n**3 / seconds / 1e12


def measure_machine(threads: int | None = None) -> HardwareSpec:
    """Run the probes with ``threads`` torch threads (default: all cores available)."""
    import torch

    threads = threads or len(os.sched_getaffinity(0))
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    started = time.perf_counter()
    try:
        llc = _llc_bytes()
        copy_gbs, read_gbs = _copy_and_read_gbs(copy_buffer_bytes(llc))
        gemv_gbs = {
            name: {cols: _gemv_gbs(name, cols, llc) for cols in GEMV_ROW_LENGTHS}
            for name in PROBED_GEMV_DTYPES
        }
        gemm_tflops = {name: _gemm_tflops(name) for name in PROBED_GEMV_DTYPES}
        int8 = _int8_gemm_tflops()
        if int8 is not None:
            gemm_tflops["int8"] = int8
    finally:
        torch.set_num_threads(previous_threads)

    measurement = CpuMeasurement(
        threads=threads,
        copy_gbs=copy_gbs,
        read_gbs=read_gbs,
        gemv_gbs=gemv_gbs,
        gemm_tflops=gemm_tflops,
        load_average=os.getloadavg()[0],
        cpu_model=cpu_model(),
        torch_version=torch.__version__,
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        seconds=time.perf_counter() - started,
    )
    memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return HardwareSpec(
        name=f"this ({measurement.cpu_model}, {threads} threads)",
        kind="cpu",
        memory_gb=memory_bytes / 1e9,
        memory_bandwidth_gbs=copy_gbs,
        matmul_tflops=gemm_tflops,
        compute_efficiency=MEASURED_COMPUTE_EFFICIENCY,
        bandwidth_efficiency={"default": MEASURED_UNPROBED_BANDWIDTH_EFFICIENCY},
        source=(
            f"measured on {platform.node()} with torch {torch.__version__}, {threads} threads, "
            f"load average {measurement.load_average:.2f} (load lowers the figures)"
        ),
        measurement=measurement,
    )


def _save_entry(path: Path, entries: dict[str, dict[str, object]], spec: HardwareSpec) -> None:
    assert spec.measurement is not None
    entries[str(spec.measurement.threads)] = spec.model_dump(mode="json")
    write_json(path, {"probe_version": PROBE_VERSION, "entries": entries})


def cache_path(cache_dir: Path | None = None) -> Path:
    """The cache file of this host: ``hardware-<first 12 hex of sha256(hostname)>.json``."""
    host_hash = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12]
    return (cache_dir or DEFAULT_CACHE_DIR).expanduser() / f"hardware-{host_hash}.json"


def _load_cache(path: Path) -> dict[str, dict[str, object]]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}  # a torn write: measure again rather than fail
    if data.get("probe_version") != PROBE_VERSION:
        return {}
    entries: dict[str, dict[str, object]] = data.get("entries", {})
    return entries


def measured_this_machine(
    threads: int | None = None, cache_dir: Path | None = None, remeasure: bool = False
) -> HardwareSpec:
    """This machine's figures for ``threads``, from the cache or measured (then cached)."""
    import torch

    threads = threads or len(os.sched_getaffinity(0))
    path = cache_path(cache_dir)
    entries = _load_cache(path)
    key = str(threads)
    if not remeasure and key in entries:
        spec = HardwareSpec.model_validate(entries[key])
        same_setup = spec.measurement is not None and (
            spec.measurement.torch_version == torch.__version__
            and spec.measurement.cpu_model == cpu_model()
        )
        if same_setup:
            return spec
    spec = measure_machine(threads)
    _save_entry(path, entries, spec)
    return spec


def add_shape_probes(spec: HardwareSpec, dtype: str, shapes: list[tuple[int, int]]) -> HardwareSpec:
    """A measured spec with GEMV probes at a model's own matrix shapes added (nothing saved).

    A model has only a few distinct shapes, so measuring them exactly is cheap, and it
    catches what the large-matrix probes cannot: per-call costs on small matrices and slow
    kernels for short rows. Shapes already probed are kept as they are.
    """
    measurement = spec.measurement
    if measurement is None or dtype not in PROBED_GEMV_DTYPES:
        return spec
    import torch

    probes = dict(measurement.gemv_shape_gbs.get(dtype, {}))
    missing = [(r, c) for r, c in shapes if shape_key(r, c) not in probes]
    if not missing:
        return spec
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(measurement.threads)
    try:
        llc = _llc_bytes()
        probes.update({shape_key(r, c): _gemv_shape_gbs(dtype, r, c, llc) for r, c in missing})
    finally:
        torch.set_num_threads(previous_threads)
    by_shape = {**measurement.gemv_shape_gbs, dtype: dict(sorted(probes.items()))}
    return spec.model_copy(
        update={"measurement": measurement.model_copy(update={"gemv_shape_gbs": by_shape})}
    )


def with_shape_probes(
    spec: HardwareSpec,
    dtype: str,
    shapes: list[tuple[int, int]],
    cache_dir: Path | None = None,
) -> HardwareSpec:
    """:func:`add_shape_probes`, and the result cached (``quantbench estimate`` on its own)."""
    updated = add_shape_probes(spec, dtype, shapes)
    if updated is not spec:
        save_measured(updated, cache_dir)
    return updated


def save_measured(spec: HardwareSpec, cache_dir: Path | None = None) -> None:
    """Store (or replace) a measured spec in this host's cache, under its thread count."""
    path = cache_path(cache_dir)
    _save_entry(path, _load_cache(path), spec)
