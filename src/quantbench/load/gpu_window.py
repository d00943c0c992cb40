"""The GPUs' counters over a load point's measured window: utilization, memory used, power and
SM clock of every GPU, sampled in a thread of the parent process while the point's load process
runs, and summarised over the samples that fall inside the window (warm-up and the tail after
the last measured request excluded).

The window is only known once the point's records are read back (its first measured start, the
end of its last measured request: :mod:`quantbench.load.metrics`), so the sampler runs from the
load process's start to its exit and keeps each sample's time on the records' clock
(``time.monotonic()``); :meth:`GpuSampler.over` keeps the samples inside the window. Where
:class:`~quantbench.accelerator.telemetry.Telemetry` finds no GPU, nothing runs: no thread, no
fork, no summary (the point's ``gpu`` is None and its JSON has no such key).

    telemetry = Telemetry()
    with GpuSampler(telemetry) as sampler:
        records = run_plan(...)
    result.gpu = sampler.over(result.window.start, result.window.end)
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from quantbench.accelerator.telemetry import DeviceSample, Telemetry
from quantbench.schemas.session import GpuDeviceWindow, GpuWindow

SAMPLE_INTERVAL_S = 0.5
"""Seconds between two reads of every GPU's counters (nvidia-smi answers in tens of ms)."""

Sample = tuple[float, Sequence[DeviceSample]]
"""When (monotonic seconds, the middle of the read) and what every GPU said."""


MEAN_DECIMALS = 2
"""Means are rounded to the counters' own resolution (nvidia-smi's power is in 0.01 W): a mean
of equal samples is that sample, not 612.4499999999999."""


def _mean(values: Sequence[float]) -> float | None:
    return round(math.fsum(values) / len(values), MEAN_DECIMALS) if values else None


def device_window(index: int, samples: Sequence[DeviceSample]) -> GpuDeviceWindow:
    """One GPU's samples summarised: a counter it did not report counts in none of its figures."""

    def present(name: str) -> list[float]:
        return [v for s in samples if (v := getattr(s, name)) is not None]

    util, mem = present("utilization_pct"), present("memory_used_mib")
    power, clock = present("power_w"), present("sm_clock_mhz")
    return GpuDeviceWindow(
        index=index,
        samples=len(samples),
        utilization_mean_pct=_mean(util),
        utilization_max_pct=max(util, default=None),
        memory_used_max_mib=max(mem, default=None),
        power_mean_w=_mean(power),
        power_max_w=max(power, default=None),
        sm_clock_mean_mhz=_mean(clock),
    )


def summarize_samples(
    samples: Sequence[Sample],
    start: float,
    end: float,
    interval_s: float = SAMPLE_INTERVAL_S,
) -> GpuWindow | None:
    """Every GPU's figures over the samples taken in ``[start, end]``; None where none was."""
    inside = [devices for t, devices in samples if start <= t <= end]
    if not inside:
        return None
    by_index: dict[int, list[DeviceSample]] = {}
    for devices in inside:
        for d in devices:
            by_index.setdefault(d.index, []).append(d)
    return GpuWindow(
        interval_s=interval_s,
        samples=len(inside),
        devices=[device_window(i, by_index[i]) for i in sorted(by_index)],
    )


def _weighted(pairs: Sequence[tuple[float | None, int]]) -> float | None:
    """The mean of per-repeat means, each weighted by its samples (a missing mean left out)."""
    kept = [(v, n) for v, n in pairs if v is not None and n > 0]
    total = sum(n for _, n in kept)
    return round(math.fsum(v * n for v, n in kept) / total, MEAN_DECIMALS) if total else None


def _top(values: Sequence[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def fold_windows(windows: Sequence[GpuWindow | None]) -> GpuWindow | None:
    """The repeats of one point as one window: samples added, means weighted by samples,
    maxima the largest (None where no repeat was sampled)."""
    found = [w for w in windows if w is not None]
    if not found:
        return None
    per_device: dict[int, list[GpuDeviceWindow]] = {}
    for w in found:
        for d in w.devices:
            per_device.setdefault(d.index, []).append(d)
    devices = []
    for index in sorted(per_device):
        ds = per_device[index]
        devices.append(
            GpuDeviceWindow(
                index=index,
                samples=sum(d.samples for d in ds),
                utilization_mean_pct=_weighted([(d.utilization_mean_pct, d.samples) for d in ds]),
                utilization_max_pct=_top([d.utilization_max_pct for d in ds]),
                memory_used_max_mib=_top([d.memory_used_max_mib for d in ds]),
                power_mean_w=_weighted([(d.power_mean_w, d.samples) for d in ds]),
                power_max_w=_top([d.power_max_w for d in ds]),
                sm_clock_mean_mhz=_weighted([(d.sm_clock_mean_mhz, d.samples) for d in ds]),
            )
        )
    return GpuWindow(
        interval_s=found[0].interval_s, samples=sum(w.samples for w in found), devices=devices
    )


class GpuSampler:
    """Reads every GPU's counters every ``interval_s`` (default :data:`SAMPLE_INTERVAL_S`) in a
    daemon thread, from entering the ``with`` block to leaving it; inert (no thread) where
    ``telemetry`` has no GPU."""

    def __init__(
        self,
        telemetry: Telemetry,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.telemetry = telemetry
        self.interval_s = SAMPLE_INTERVAL_S if interval_s is None else interval_s
        self.clock = clock
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _read(self) -> None:
        before = self.clock()
        devices = self.telemetry.devices()
        if devices:  # an empty answer (nvidia-smi failed this once) is no sample
            self.samples.append(((before + self.clock()) / 2, devices))

    def _loop(self) -> None:
        self._read()
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> GpuSampler:
        if self.telemetry.available:
            self._thread = threading.Thread(target=self._loop, name="gpu-window", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def over(self, start: float, end: float) -> GpuWindow | None:
        """The figures over the samples inside ``[start, end]`` (None: no GPU, or none there)."""
        return summarize_samples(self.samples, start, end, self.interval_s)


__all__ = [
    "SAMPLE_INTERVAL_S",
    "GpuSampler",
    "device_window",
    "fold_windows",
    "summarize_samples",
]
