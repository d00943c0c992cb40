"""The GPUs' counters over a load point's window: the summary of recorded samples, the repeats
folded, the sampler on the stand-in GPU, and nothing at all on a CPU machine."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from tests.schemas import examples

from quantbench.accelerator import nvidia as found
from quantbench.accelerator.telemetry import DeviceSample, Telemetry
from quantbench.decision.rows import fold_repeats
from quantbench.load import gpu_window
from quantbench.load.gpu_window import (
    GpuSampler,
    device_window,
    fold_windows,
    summarize_samples,
)
from quantbench.schemas.bench import BenchRow
from quantbench.schemas.session import GpuDeviceWindow, GpuWindow, PointResult

SHAPE = {"kind": "concurrency", "concurrency": 4}
RANDOM = {"source": "random", "input_len": 8, "output_len": 6, "num_prompts": 16}
COMMON = {"server_point": "default", "settings": {}, "command": ["srv"], "env": {},
          "load_point": "c4", "shape": SHAPE, "error": None}  # fmt: skip


def test_a_window_s_figures_are_the_exact_means_and_maxima_of_its_samples() -> None:
    samples = [
        (9.0, [DeviceSample(0, 99.0, 70000.0, 700.0, 2000.0)]),  # before the window: warm-up
        (10.0, [DeviceSample(0, 80.0, 60000.0, 600.0, 1900.0),
                DeviceSample(1, 10.0, 1000.0, 100.0, None)]),
        (10.5, [DeviceSample(0, 90.0, 61000.0, 620.0, 1980.0),
                DeviceSample(1, 20.0, 1200.0, None, None)]),
        (11.0, [DeviceSample(0, 100.0, 60500.0, 640.0, 1990.0),
                DeviceSample(1, 30.0, 1100.0, 140.0, None)]),
        (11.5, [DeviceSample(0, 0.0, 80000.0, 900.0, 210.0)]),  # after the last measured request
    ]  # fmt: skip
    window = summarize_samples(samples, 10.0, 11.0, interval_s=0.5)
    assert window == GpuWindow(
        interval_s=0.5,
        samples=3,
        devices=[
            GpuDeviceWindow(index=0, samples=3, utilization_mean_pct=90.0,
                            utilization_max_pct=100.0, memory_used_max_mib=61000.0,
                            power_mean_w=620.0, power_max_w=640.0,
                            sm_clock_mean_mhz=1956.67),  # 5870 / 3, to 0.01 MHz
            # a counter a GPU did not report counts in none of its figures
            GpuDeviceWindow(index=1, samples=3, utilization_mean_pct=20.0,
                            utilization_max_pct=30.0, memory_used_max_mib=1200.0,
                            power_mean_w=120.0, power_max_w=140.0, sm_clock_mean_mhz=None),
        ],
    )  # fmt: skip
    assert summarize_samples(samples, 12.0, 13.0) is None  # nothing sampled inside the window
    empty = device_window(3, [DeviceSample(3, None, None, None, None)])
    assert empty.samples == 1 and empty.utilization_mean_pct is None and empty.power_max_w is None


def _window(samples: int, util: float, top: float, mem: float, power: float) -> GpuWindow:
    device = GpuDeviceWindow(index=0, samples=samples, utilization_mean_pct=util,
                             utilization_max_pct=top, memory_used_max_mib=mem, power_mean_w=power,
                             power_max_w=power + 10, sm_clock_mean_mhz=1980.0)  # fmt: skip
    return GpuWindow(interval_s=0.5, samples=samples, devices=[device])


def test_repeats_fold_into_one_window_weighted_by_their_samples() -> None:
    folded = fold_windows([_window(1, 60.0, 70.0, 500.0, 300.0), None,
                           _window(3, 80.0, 95.0, 400.0, 500.0)])  # fmt: skip
    assert folded is not None and folded.samples == 4
    d = folded.devices[0]
    assert (d.samples, d.utilization_mean_pct, d.utilization_max_pct) == (4, 75.0, 95.0)
    assert (d.memory_used_max_mib, d.power_mean_w, d.power_max_w) == (500.0, 450.0, 510.0)
    assert fold_windows([None, None]) is None


def _stand_in_answer(d: GpuDeviceWindow) -> tuple[float | None, ...]:
    return (d.utilization_mean_pct, d.utilization_max_pct, d.memory_used_max_mib,
            d.power_mean_w, d.power_max_w, d.sm_clock_mean_mhz)  # fmt: skip


def test_the_stand_in_gpu_is_sampled_through_a_short_window(fake_gpu) -> None:  # type: ignore[no-untyped-def]
    telemetry = Telemetry()
    assert telemetry.available
    with GpuSampler(telemetry, interval_s=0.05) as sampler:
        assert sampler.running
        start = time.monotonic()
        time.sleep(0.4)
        end = time.monotonic()
    assert not sampler.running  # the thread is stopped and joined on leaving the block
    window = sampler.over(start, end)
    assert window is not None and window.samples >= 2 and window.interval_s == 0.05
    [device] = window.devices
    assert device.index == 0 and device.samples == window.samples
    assert _stand_in_answer(device) == (87.0, 87.0, 61234.0, 612.45, 612.45, 1980.0)


def test_every_gpu_of_the_machine_is_summarised(fake_gpu_factory) -> None:  # type: ignore[no-untyped-def]
    fake_gpu_factory("h200", count=2)
    with GpuSampler(Telemetry(), interval_s=0.05) as sampler:
        time.sleep(0.2)
    window = sampler.over(0.0, time.monotonic())
    assert window is not None and [d.index for d in window.devices] == [0, 1]


def test_no_gpu_no_thread_no_fork_no_figure(no_gpu, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def forbidden(*args: object) -> str:
        raise AssertionError("nvidia-smi asked on a machine without a GPU")

    monkeypatch.setattr(found, "run_nvidia_smi", forbidden)
    telemetry = Telemetry()
    assert not telemetry.available
    threads = threading.active_count()
    with GpuSampler(telemetry, interval_s=0.01) as sampler:
        assert not sampler.running and threading.active_count() == threads
        time.sleep(0.05)
    assert sampler.samples == [] and sampler.over(0.0, time.monotonic()) is None


def _point(gpu: GpuWindow | None = None) -> PointResult:
    result = examples.point_result(examples.records(random.Random(3), "c4", SHAPE), SHAPE)
    result.gpu = gpu
    return result


def test_a_cpu_point_and_row_are_written_without_a_gpu_key() -> None:
    point = _point()
    dumped = point.model_dump(mode="json")
    assert "gpu" not in dumped
    # exactly the fields the point had before the GPUs' counters, in the same JSON
    assert set(dumped) == set(PointResult.model_fields) - {"gpu"}
    assert PointResult.model_validate_json(point.model_dump_json()) == point
    row = fold_repeats([point, _point()], workload="chat", confidence=0.95, price_per_hour=1.0)
    assert "gpu" not in row
    text = BenchRow.model_validate({**COMMON, **row}).model_dump_json()
    assert '"gpu"' not in text


def test_a_row_carries_its_repeats_gpu_window_and_reads_back() -> None:
    points = [_point(_window(2, 86.0, 87.0, 61234.0, 612.45)),
              _point(_window(2, 88.0, 89.0, 61000.0, 612.45))]  # fmt: skip
    row = fold_repeats(points, workload="chat", confidence=0.95, price_per_hour=1.0)
    bench = BenchRow.model_validate({**COMMON, **row})
    assert bench.gpu is not None and bench.gpu.samples == 4
    assert _stand_in_answer(bench.gpu.devices[0]) == (87.0, 89.0, 61234.0, 612.45, 622.45, 1980.0)
    assert BenchRow.model_validate_json(bench.model_dump_json()) == bench
    assert json.loads(bench.model_dump_json())["gpu"]["devices"][0]["index"] == 0


@pytest.mark.server
def test_a_session_on_the_stand_in_gpu_records_each_point_s_window(  # type: ignore[no-untyped-def]
    bench, fake_gpu, monkeypatch
) -> None:
    from quantbench.mock_server import Behaviour, Script

    monkeypatch.setattr(gpu_window, "SAMPLE_INTERVAL_S", 0.02)
    script = Script(behaviours=[Behaviour(ttft_ms=50, itl_ms=20, output_tokens=6)])
    run = bench(script, {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 2}],
                         "num_requests": 8, "warmup_requests": 2})  # fmt: skip
    window = run.point.gpu
    assert window is not None and window.samples >= 2 and window.interval_s == 0.02
    assert _stand_in_answer(window.devices[0])[2:4] == (61234.0, 612.45)


@pytest.mark.server
def test_a_session_without_a_gpu_writes_no_gpu_key(bench, no_gpu, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from quantbench.mock_server import Behaviour, Script

    run = bench(Script(behaviours=[Behaviour(output_tokens=4)]),
                {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 1}],
                 "num_requests": 3})  # fmt: skip
    assert run.point.gpu is None
    written = (tmp_path / "out0" / "summary.json").read_text(encoding="utf-8")
    assert '"gpu"' not in written
