"""The GPU found here: its datasheet entry by the driver's name, measured by the calibrate stage
where runtime.device resolves to cuda, and the estimate's `this` on it.

The measuring functions need a GPU and are replaced here; what is tested is the wiring around
them (which path a calibration takes, what it records, what the estimate accepts) and the
arithmetic that turns the probes into a spec, which runs as it is.
"""

from __future__ import annotations

import json

import pytest
from tests.stage_script import device_env_kept, load_stage, params_file, run_stage  # noqa: F401

from quantbench.accelerator import Gpu, detect
from quantbench.estimate import calibrate, gpu, machine
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.hardware import GPU_TABLE, datasheet_name, table_entry, this_gpu
from quantbench.estimate.lookup import resolve_hardware
from quantbench.schemas import io as schema_io
from quantbench.schemas.machine import MachineCalibration

from .conftest import QWEN3_4B_CONFIG, fake_cpu
from .test_calibrate import whole_calibration

# Names as NVML and nvidia-smi give them (driver 535-570), the memory they report (MiB), and the
# table entry each is: the driver's names are not the datasheets'.
RECORDED = [
    ("NVIDIA H100 80GB HBM3", 81559, "H100"),
    ("NVIDIA H100 PCIe", 81559, "H100-PCIe"),
    ("NVIDIA H100 NVL", 95830, "H100-NVL"),
    ("NVIDIA H200", 143771, "H200"),
    ("NVIDIA A100-SXM4-80GB", 81920, "A100"),
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
    ("NVIDIA A100-PCIE-40GB", 40960, "A100-40GB"),
    ("NVIDIA A100 80GB PCIe", 81920, "A100-PCIe"),
    ("NVIDIA L40S", 46068, "L40S"),
    ("NVIDIA L40", 46068, "L40"),
    ("NVIDIA L4", 23034, "L4"),
    ("NVIDIA A10G", 23028, "A10G"),
    ("NVIDIA A10", 23028, "A10"),
    ("NVIDIA B200", 183359, "B200"),
]


@pytest.mark.parametrize(("name", "memory", "entry"), RECORDED)
def test_the_drivers_names_are_matched_to_their_datasheet_entries(name, memory, entry) -> None:
    assert datasheet_name(name, memory) == entry
    assert table_entry(entry) is not None


def test_the_memory_found_tells_the_40_from_the_80_gb_a100() -> None:
    # some drivers name the SXM4 part without its memory: what the driver counts decides
    assert datasheet_name("NVIDIA A100-SXM4", 81920) == "A100"
    assert datasheet_name("NVIDIA A100-SXM4", 40960) == "A100-40GB"
    assert datasheet_name("NVIDIA A100-SXM4-80GB") == "A100"  # memory unknown: the name's


def test_a_gpu_the_table_does_not_hold_has_no_entry() -> None:
    for name in ("NVIDIA GH200 480GB", "NVIDIA H200 NVL", "NVIDIA RTX 6000 Ada Generation",
                 "Tesla T4"):  # fmt: skip
        assert datasheet_name(name, 49140) is None, name


def test_the_new_entries_carry_their_sources_and_aliases_resolve() -> None:
    for name in ("H100-NVL", "A100-PCIe", "A10"):
        spec = GPU_TABLE[name.upper()]
        assert spec.source.count("https://") == 1 and spec.kind == "gpu"
        assert spec.matmul_tflops["bf16"] > spec.matmul_tflops["fp32"]
    assert resolve_hardware("h100-sxm").name == "H100"
    assert resolve_hardware("A100-SXM").memory_gb == 80


H100 = Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "9.0", "GPU-0")


def _probes(**update) -> gpu.GpuProbes:
    base = dict(
        copy_gbs=2900.0,
        gemm_tflops={"bf16": 742.0, "int8": 1200.0},
        shape_tflops={"512x2560": 371.0, "2560x2560": 742.0},
        shape_weights={"512x2560": 1.0, "2560x2560": 1.0},
    )
    return gpu.GpuProbes(**{**base, **update})


def test_a_measured_gpu_is_its_probes_beside_its_datasheet() -> None:
    spec = gpu.gpu_spec(H100, _probes(), torch_version="2.13.0", cuda_version="12.8")
    entry = GPU_TABLE["H100"]
    assert (spec.kind, spec.memory_bandwidth_gbs) == ("gpu", 2900.0)
    assert spec.memory_gb == pytest.approx(81559 * 2**20 / 1e9)
    # measured dtypes as measured; fp8 (not measured) at bf16's measured share of its peak
    assert spec.matmul_tflops["bf16"] == 742.0 and spec.matmul_tflops["int8"] == 1200.0
    share = 742.0 / entry.matmul_tflops["bf16"]
    assert spec.matmul_tflops["fp8"] == pytest.approx(entry.matmul_tflops["fp8"] * share)
    # equal FLOPs at half and at the full rate: the harmonic mean is 2/3 of the square rate
    assert spec.compute_efficiency == pytest.approx(2 / 3)
    assert spec.bandwidth_efficiency == {"default": gpu.MEASURED_GPU_BANDWIDTH_EFFICIENCY}
    record = spec.gpu
    assert record is not None and record.datasheet == "H100"
    assert record.bandwidth_ratio == pytest.approx(2900 / 3350)
    assert record.matmul_ratio == pytest.approx({"bf16": 742 / 989.4, "int8": 1200 / 1978.9})
    assert "its datasheet entry H100" in spec.source


def test_a_gpu_without_an_entry_is_estimated_from_its_calibration_alone() -> None:
    other = Gpu(0, "NVIDIA RTX 6000 Ada Generation", 49140, "8.9")
    spec = gpu.gpu_spec(other, _probes(shape_tflops={}, shape_weights={}))
    assert spec.gpu is not None and spec.gpu.datasheet is None
    assert spec.gpu.bandwidth_ratio is None and spec.gpu.matmul_ratio == {}
    assert set(spec.matmul_tflops) == {"bf16", "int8"}  # nothing to scale the others from
    assert "no datasheet entry" in spec.source and "calibration alone" in spec.source
    assert "compute efficiency assumed" in spec.source


@pytest.fixture
def gpu_probes(monkeypatch):
    """The GPU's measuring functions replaced by fixed figures; the CPU's refuse to run."""
    calls: dict[str, object] = {}

    def shapes(device, dims, tokens=gpu.PREFILL_TOKENS):
        calls["shapes"] = dims
        return {f"{r}x{c}": 500.0 for r, c in dims}

    def refuse(*args, **kwargs):
        raise AssertionError("a calibration on cuda measured the CPU")

    monkeypatch.setattr(gpu, "_copy_gbs", lambda device: calls.setdefault("copy", 2900.0))
    monkeypatch.setattr(gpu, "_gemm_tflops", lambda device: {"bf16": 742.0})
    monkeypatch.setattr(gpu, "_shape_tflops", shapes)
    monkeypatch.setattr(machine, "measure_machine", refuse)
    return calls


def test_calibrate_on_cuda_measures_the_gpu_and_records_its_datasheet(
    fake_gpu, gpu_probes, tiny_folder
) -> None:
    spec = calibrate.calibrate(tiny_folder, threads=1, device="cuda")
    assert gpu_probes["shapes"] == [(8, 8), (4, 8), (16, 8), (8, 16)]  # q, k/v, gate/up, down
    assert spec.gpu is not None and spec.gpu.gpu == "NVIDIA H100 80GB HBM3"
    assert spec.gpu.datasheet == "H100" and spec.measurement is None
    assert calibrate.lacking(spec, tiny_folder) == []
    record = calibrate.calibration_record(spec, tiny_folder)
    assert record.device == "cuda" and record.datasheet == GPU_TABLE["H100"]
    # the estimate takes it on this GPU, and refuses it on the CPU or another GPU
    here = this_gpu("cuda")
    assert calibrate.check_calibration(spec, tiny_folder, None, "this.json", here) is spec
    with pytest.raises(EstimateInputError, match="measured the GPU 'NVIDIA H100.*on its CPU"):
        calibrate.check_calibration(spec, tiny_folder, None, "this.json", None)
    l4 = Gpu(0, "NVIDIA L4", 23034, "8.9")
    with pytest.raises(EstimateInputError, match="computes on the GPU 'NVIDIA L4'"):
        calibrate.check_calibration(spec, tiny_folder, None, "this.json", l4)
    # a CPU's calibration is not this GPU's
    with pytest.raises(EstimateInputError, match="measured this machine's CPU"):
        calibrate.check_calibration(whole_calibration(tiny_folder), tiny_folder, None,
                                    "this.json", here)  # fmt: skip


def test_a_gpu_calibration_without_the_models_shapes_is_not_whole(gpu_probes, tmp_path) -> None:
    folder = tmp_path / "qwen3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_4B_CONFIG))
    small = gpu.gpu_spec(H100, _probes())  # shapes of another model
    assert calibrate.lacking(small, folder) == ["bf16 products at the model's shapes"]


def test_the_calibrate_stage_measures_what_runtime_device_resolves_to(
    fake_gpu, gpu_probes, tiny_folder, tmp_path, monkeypatch
) -> None:
    stage = load_stage("calibrate", monkeypatch)
    out = tmp_path / "this.json"
    params = params_file(tmp_path, device="auto")
    run_stage(stage, monkeypatch, params, "--model", str(tiny_folder), "--out", str(out))
    stored = schema_io.read(out, MachineCalibration)
    assert stored.device == "cuda" and stored.datasheet is not None
    assert stored.datasheet.name == "H100" and stored.hardware.gpu is not None
    assert stored.hardware.gpu.copy_gbs == 2900.0


def test_the_calibrate_stage_measures_the_cpu_where_runtime_device_is_cpu(
    fake_gpu, tiny_folder, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(calibrate, "measured_engines", lambda: [])
    monkeypatch.setattr(machine, "measure_machine", lambda threads=None: fake_cpu())
    monkeypatch.setattr(machine, "_gemv_shape_gbs", lambda dtype, r, c, llc: 5.0)
    monkeypatch.setattr(gpu, "measure_gpu", lambda *a: pytest.fail("measured the GPU"))
    stage = load_stage("calibrate", monkeypatch)
    out = tmp_path / "this.json"
    run_stage(stage, monkeypatch, params_file(tmp_path, device="cpu"), "--model",
              str(tiny_folder), "--out", str(out))  # fmt: skip
    stored = schema_io.read(out, MachineCalibration)
    assert (stored.device, stored.datasheet, stored.hardware.gpu) == ("cpu", None, None)
    assert not detect().has_gpu  # runtime.device: cpu hid the GPU for what the stage started


def test_a_version_1_calibration_reads_as_a_cpus(tmp_path) -> None:
    from tests.schemas import examples

    data = examples.machine_calibration().model_dump(mode="json")
    data = {k: v for k, v in data.items() if k not in ("device", "datasheet")}
    data["schema_version"] = 1
    path = tmp_path / "this.json"
    path.write_text(json.dumps(data))
    stored = schema_io.read(path, MachineCalibration)
    assert (stored.device, stored.datasheet) == ("cpu", None)
