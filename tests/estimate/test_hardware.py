"""The hardware table, lookups, and how efficiencies turn into rates."""

from __future__ import annotations

import json

import pytest

from quantbench.estimate.hardware import (
    DATASHEET_BANDWIDTH_EFFICIENCY,
    DATASHEET_COMPUTE_EFFICIENCY,
    GPU_TABLE,
    check_hardware_name,
    hardware_rates,
    known_hardware,
)
from quantbench.estimate.lookup import resolve_hardware
from quantbench.schemas.hardware import HardwareSpec, interpolate_log2

from .conftest import fake_cpu

REQUIRED = ("H100", "H200", "A100", "L40S", "L4", "A10G", "B200")


def test_table_covers_the_issue_list_with_sources():
    for name in REQUIRED:
        spec = GPU_TABLE[name]
        assert spec.source.count("https://") == 1, name
        assert spec.memory_gb > 0 and spec.memory_bandwidth_gbs > 0
        assert spec.matmul_tflops["bf16"] > spec.matmul_tflops["fp32"]
        assert spec.compute_efficiency == DATASHEET_COMPUTE_EFFICIENCY
        assert spec.bandwidth_efficiency == {"default": DATASHEET_BANDWIDTH_EFFICIENCY}


def test_lookup_is_case_insensitive_and_copies():
    spec = resolve_hardware("l4")
    assert spec.name == "L4"
    spec.memory_gb = 1.0
    assert resolve_hardware("L4").memory_gb == 24


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="'Z80'.*H100"):
        check_hardware_name("Z80")
    assert "this" in known_hardware()


def test_saved_json_round_trip(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(fake_cpu().model_dump(mode="json")))
    assert resolve_hardware(str(path)) == fake_cpu()
    with pytest.raises(FileNotFoundError):
        resolve_hardware(str(tmp_path / "missing.json"))


def test_rates_fall_back_to_bf16_and_say_so():
    rates = hardware_rates(resolve_hardware("A100"), "fp8")
    assert rates.compute_dtype == "bf16" and rates.peak_flops == 312e12
    assert "no fp8" in rates.notes[0]


def test_overrides_replace_the_entry_efficiencies():
    rates = hardware_rates(
        resolve_hardware("H100"), "bf16", compute_efficiency=0.5, bandwidth_efficiency=0.9
    )
    assert rates.flops == pytest.approx(989.4e12 * 0.5)
    assert rates.bandwidth == pytest.approx(3350e9 * 0.9)


def test_interpolation_in_log2():
    points = {512: 4.0, 2048: 8.0}
    assert interpolate_log2(points, 1024) == pytest.approx(6.0)
    assert interpolate_log2(points, 100) == 4.0 and interpolate_log2(points, 10**6) == 8.0


def test_streaming_efficiency_weighs_shapes_harmonically():
    cpu = fake_cpu(copy_gbs=20.0, gemv_bf16={512: 5.0, 2048: 10.0}, shape_bf16={"8x512": 4.0})
    # half the bytes at the exact probe (4 GB/s), half interpolated at 2048 (10 GB/s)
    shapes = {(8, 512): 1.0, (8, 2048): 1.0}
    rate = 2.0 / (1 / 4.0 + 1 / 10.0)
    assert cpu.streaming_efficiency("bf16", shapes) == pytest.approx(rate / 20.0)
    # an unprobed dtype keeps the table factor
    assert cpu.streaming_efficiency("int8", shapes) == 1.0


def test_gpu_streaming_efficiency_is_the_table_factor():
    h100: HardwareSpec = resolve_hardware("H100")
    assert h100.streaming_efficiency("bf16", {(8, 8): 1.0}) == DATASHEET_BANDWIDTH_EFFICIENCY
