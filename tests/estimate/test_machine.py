"""Measuring this machine: the cache (fast, faked) and the probes themselves (slow)."""

from __future__ import annotations

import json

import pytest

from quantbench.estimate import machine

from .conftest import fake_cpu


@pytest.fixture
def counting_measure(monkeypatch):
    calls = []

    def fake_measure(threads=None):
        calls.append(threads)
        spec = fake_cpu()
        return spec.model_copy(
            update={"measurement": spec.measurement.model_copy(update={"threads": threads})}
        )

    monkeypatch.setattr(machine, "measure_machine", fake_measure)
    monkeypatch.setattr(machine, "cpu_model", lambda: "test cpu")
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "__version__", "0")
    return calls


def test_cache_per_thread_count(tmp_path, counting_measure):
    first = machine.measured_this_machine(threads=1, cache_dir=tmp_path)
    again = machine.measured_this_machine(threads=1, cache_dir=tmp_path)
    other = machine.measured_this_machine(threads=2, cache_dir=tmp_path)
    assert counting_measure == [1, 2]
    assert first == again and other.measurement.threads == 2
    data = json.loads(machine.cache_path(tmp_path).read_text())
    assert sorted(data["entries"]) == ["1", "2"]
    assert machine.cache_path(tmp_path).name.startswith("hardware-")


def test_remeasure_and_stale_probe_version(tmp_path, counting_measure):
    machine.measured_this_machine(threads=1, cache_dir=tmp_path)
    machine.measured_this_machine(threads=1, cache_dir=tmp_path, remeasure=True)
    path = machine.cache_path(tmp_path)
    data = json.loads(path.read_text())
    data["probe_version"] = -1
    path.write_text(json.dumps(data))
    machine.measured_this_machine(threads=1, cache_dir=tmp_path)
    assert counting_measure == [1, 1, 1]


def test_a_torn_cache_file_is_measured_again(tmp_path, counting_measure):
    path = machine.cache_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    machine.measured_this_machine(threads=1, cache_dir=tmp_path)
    assert counting_measure == [1]


@pytest.mark.slow
@pytest.mark.timing  # measures this machine's rates: run alone
def test_probes_on_this_machine(tmp_path):
    spec = machine.measured_this_machine(threads=1, cache_dir=tmp_path)
    m = spec.measurement
    assert m is not None and m.seconds < 60
    assert 1 < m.copy_gbs < 2000 and 1 < m.read_gbs < 2000
    assert 0.001 < m.gemm_tflops["bf16"] < 100
    assert set(m.gemv_gbs) == {"bf16", "fp32"}
    refined = machine.with_shape_probes(spec, "bf16", [(576, 576), (1536, 576)], tmp_path)
    assert set(refined.measurement.gemv_shape_gbs["bf16"]) == {"576x576", "1536x576"}
    cached = machine.measured_this_machine(threads=1, cache_dir=tmp_path)
    assert cached.measurement.gemv_shape_gbs == refined.measurement.gemv_shape_gbs


def test_a_shape_probe_cycles_through_at_most_a_bounded_number_of_matrices():
    # An 8x16 bf16 matrix is 256 bytes: filling twice a 105 MB cache took 860,000 calls a pass,
    # and the calibration of a tiny model 7 minutes. Past the cap a pass is dispatch-bound anyway.
    llc = 105 * 2**20
    assert machine.probe_count(8, 16, 2, llc) == machine.MAX_PROBE_CALLS
    # a real model's shapes still stream from memory: SmolLM2's 576x576 and 576x1536 in bf16
    assert machine.probe_count(576, 576, 2, llc) == 332
    assert machine.probe_count(576, 1536, 2, llc) == 125
    assert machine.probe_count(576, 576, 2, 256 * 2**20) < machine.MAX_PROBE_CALLS


def test_a_slow_probe_repeats_only_what_fits_its_budget(monkeypatch) -> None:
    """On a CPU that emulates bf16 (or has no int8 kernel) one call takes seconds: five repeats
    of each probe made the calibrate stage take 8.5 minutes on an AVX2-only EPYC. A probe
    repeats only as often as its budget allows after the warm-up call."""
    from quantbench.estimate import machine

    clock = {"t": 0.0}
    calls: list[int] = []
    monkeypatch.setattr(machine.time, "perf_counter", lambda: clock["t"])

    def slow() -> None:
        calls.append(1)
        clock["t"] += 0.7

    assert machine._best_seconds(slow, repeats=5, budget_s=1.5) == pytest.approx(0.7)
    assert len(calls) == 1 + 2  # the warm-up, then int(1.5 / 0.7) repeats
    calls.clear()

    def fast() -> None:
        calls.append(1)
        clock["t"] += 0.01

    machine._best_seconds(fast, repeats=5, budget_s=1.5)
    assert len(calls) == 1 + 5


def test_the_gemm_grows_only_while_a_product_is_quick(monkeypatch) -> None:
    from quantbench.estimate import machine

    clock = {"t": 0.0}
    monkeypatch.setattr(machine.time, "perf_counter", lambda: clock["t"])

    def product(seconds_per_flop: float):
        def make(n: int):
            def call() -> None:
                clock["t"] += 2 * n**3 * seconds_per_flop

            return call

        return make

    assert machine.gemm_size(product(1e-12)) == machine.GEMM_SIZE  # a fast CPU: full size
    slow = machine.gemm_size(product(2e-10))  # 5 GFLOP/s: 512^3 already takes 54 ms
    assert slow == machine.GEMM_START


def test_the_copy_buffer_exceeds_any_cache_and_stops_there() -> None:
    # a cloud guest reports its host's whole L3 (480 MiB here): 8x was a 3.75 GiB copy buffer,
    # 12.7 s of the calibrate stage for the rate a 1 GiB one gave in 1.9 s
    mib = 2**20
    assert machine.copy_buffer_bytes(480 * mib) == 2 * 2**30
    assert machine.copy_buffer_bytes(32 * mib) == 256 * mib  # 8x a common LLC
    assert machine.copy_buffer_bytes(4 * mib) == 256 * mib  # at least the floor
    assert machine.copy_buffer_bytes(100 * mib) == 800 * mib
