"""What `quantbench plan` prices by: this machine as calibrated where the calibration is of the
device it computes on, else the GPU found here by its datasheet; the prepared model, else a
shipped config.json; the traffic files, else the traffic generated here."""

from __future__ import annotations

import json
from pathlib import Path

from quantbench.accelerator import Gpu
from quantbench.estimate import gpu
from quantbench.estimate.priced import (
    prepared_as,
    pricing_hardware,
    pricing_model,
    pricing_traffic,
)
from quantbench.model import ModelSettings
from quantbench.schemas import io as schema_io
from quantbench.schemas.machine import MachineCalibration
from quantbench.workloads.spec import WorkloadSpec

from .conftest import TINY_CONFIG, fake_cpu

REPO = Path(__file__).resolve().parents[2]
QWEN = REPO / "profiles/models/qwen2.5-7b-instruct/config.json"


def _write(path: Path, spec) -> Path:
    schema_io.write(path, MachineCalibration(hardware=spec, model="models/base"))
    return path


def _gpu_calibration(name: str, memory: int):
    probes = gpu.GpuProbes(copy_gbs=2900.0, gemm_tflops={"bf16": 742.0})
    return gpu.gpu_spec(Gpu(0, name, memory, "9.0"), probes)


def test_the_cpus_calibration_prices_a_cpu_machine_and_says_nothing_new(no_gpu, tmp_path):
    path = _write(tmp_path / "this.json", fake_cpu())
    found = pricing_hardware(None, path, "auto", tmp_path / "workloads")
    assert (found.name, found.here, found.says, found.gpu) == ("this", True, None, None)
    missing = pricing_hardware(None, tmp_path / "none.json", "auto", tmp_path / "w")
    assert missing.spec is None and "none.json or" in (missing.why_not or "")


def test_an_uncalibrated_gpu_is_priced_by_its_datasheet(fake_gpu, tmp_path):
    found = pricing_hardware(None, tmp_path / "none.json", "auto", tmp_path / "w")
    assert found.name == "H100" and found.spec is not None and not found.here
    assert found.gpu == "NVIDIA H100 80GB HBM3"
    assert "datasheet H100 (80 GB, 3350 GB/s" in (found.says or "")
    # a calibration of the CPU (runtime.device was cpu then) is not this GPU's either
    cpu = _write(tmp_path / "cpu.json", fake_cpu())
    again = pricing_hardware(None, cpu, "auto", tmp_path / "w")
    assert again.name == "H100" and "is of its CPU" in (again.says or "")
    # and with runtime.device: cpu the GPU machine is priced as a CPU, from that calibration
    assert pricing_hardware(None, cpu, "cpu", tmp_path / "w").here


def test_a_calibrated_gpu_is_priced_as_calibrated(fake_gpu, tmp_path):
    path = _write(tmp_path / "this.json", _gpu_calibration("NVIDIA H100 80GB HBM3", 81559))
    found = pricing_hardware(None, path, "auto", tmp_path / "w")
    assert found.here and found.name == "this" and found.spec is not None
    assert found.spec.memory_bandwidth_gbs == 2900.0
    assert "priced on this GPU as calibrated" in (found.says or "")
    other = _write(tmp_path / "l4.json", _gpu_calibration("NVIDIA L4", 23034))
    assert pricing_hardware(None, other, "auto", tmp_path / "w").name == "H100"


def test_each_stand_in_gpu_is_priced_by_its_own_entry(fake_gpu_factory, tmp_path):
    for recorded, entry in (("l4", "L4"), ("h200", "H200")):
        fake_gpu_factory(recorded)
        found = pricing_hardware(None, tmp_path / "none.json", "auto", tmp_path / "w")
        assert found.name == entry, recorded


def test_asked_hardware_wins_whatever_this_machine_is(no_gpu, tmp_path):
    found = pricing_hardware("h100-sxm", tmp_path / "none.json", "cuda", tmp_path / "w")
    assert found.name == "H100" and not found.here and "--hardware h100-sxm" in (found.says or "")
    refused = pricing_hardware(None, tmp_path / "none.json", "cuda", tmp_path / "w")
    assert refused.spec is None and "runtime.device is cuda" in (refused.why_not or "")
    assert "--hardware" in (refused.why_not or "")


def test_a_base_prepared_from_another_model_is_not_this_ones(tmp_path):
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    hub = ModelSettings(source="hub", hub_id="Qwen/Qwen2.5-7B-Instruct")
    assert prepared_as(folder, hub)  # no record: taken as prepared (a folder given by hand)
    info = {
        "schema_version": 1, "dtype": "bfloat16", "weights_sha256": {}, "folder_sha256": "x",
        "size_bytes": 1,
        "architecture": {
            "model_type": "llama", "architectures": [], "num_layers": 2, "hidden_size": 8,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
            "intermediate_size": 16, "vocab_size": 32, "max_position_embeddings": 64,
            "tie_word_embeddings": True, "num_parameters": 1,
        },
        "source": {"source": "embedded", "name": "SmolLM2", "package": "p", "file": "f",
                   "file_sha256": "s", "note": "n"},
    }  # fmt: skip
    (folder / "model_info.json").write_text(json.dumps(info))
    assert prepared_as(folder, ModelSettings())  # the embedded model, as params.yaml has it
    assert not prepared_as(folder, hub)
    shipped = {"Qwen/Qwen2.5-7B-Instruct": QWEN}
    model = pricing_model(folder, hub, shipped)
    assert not model.prepared and model.arch is not None and model.arch.hidden_size == 3584
    assert model.folder == QWEN.parent and "the model's shape from" in (model.says or "")
    # another hub id is not sized by Qwen's config: not priced, and said why
    llama = ModelSettings(source="hub", hub_id="meta-llama/Llama-3.1-8B-Instruct")
    unpriced = pricing_model(folder, llama, shipped)
    assert unpriced.arch is None and "model_configs" in (unpriced.why_not or "")
    # a local model not prepared yet is sized by its own folder's config.json
    local = ModelSettings(source="local", path=QWEN.parent)
    assert pricing_model(folder, local, {}).arch == model.arch


def test_missing_traffic_is_generated_as_the_workloads_stage_would(tmp_path):
    spec = WorkloadSpec.model_validate({"name": "chat", "use": "chat", "num_requests": 8})
    corpus = [REPO / "data/calibration.txt"]
    traffic, said = pricing_traffic({"chat": spec}, tmp_path / "workloads", corpus, 4096, None)
    summary = traffic["chat"].summary
    assert summary is not None and summary.counted_with == "words"
    assert 100 < summary.mean("input_tokens", 0) < 250  # ShareGPT's 161 at full length
    assert said is not None and "counted in words" in said and "chat" in said
    traffic["chat"].write(tmp_path / "workloads")
    read, said = pricing_traffic({"chat": spec}, tmp_path / "workloads", corpus, 4096, None)
    assert said is None and read["chat"].summary == summary
