"""Each writer's real output is its schema: run the writers on small fakes and read back.

The slow and server suites run the stages themselves; these run the pieces that build each file
(in seconds), so a renamed or added field fails here, not in a 20-minute pipeline run.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.schemas import examples

from quantbench.decision.rows import checks, failed_row, fold_repeats, pick_best
from quantbench.formats.gguf import GgufSpec
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import BenchRow, Interval
from quantbench.schemas.env import EnvInfo
from quantbench.schemas.model_info import BaseModelInfo, MergedModelInfo
from quantbench.schemas.quality import EvalText, QualityReport
from quantbench.schemas.validate import ValidationVerdict
from quantbench.schemas.variant import VariantRecord

REPO = Path(__file__).resolve().parents[2]
COMMON = {"server_point": "default", "settings": {}, "command": ["srv"], "env": {}}


def test_bench_rows_are_bench_row_schema() -> None:
    """fold_repeats and failed_row make every field of a row; run_pair adds the common ones."""
    rng = random.Random(1)
    shape = {"kind": "concurrency", "concurrency": 4}
    results = [examples.point_result(examples.records(rng, "c4", shape), shape) for _ in range(3)]
    folded = {
        **COMMON,
        **checks(fold_repeats(results, workload="chat", confidence=0.95, price_per_hour=1.0)),
    }
    folded.update(load_point="c4", shape=shape, error=None)
    row = BenchRow.model_validate(folded)
    # every field but the GPUs' counters, which a point sampled on no GPU leaves out
    assert set(folded) | {"gpu"} == set(BenchRow.model_fields) and "gpu" not in folded
    # one request of twelve fails on this fast engine: error_rate 0.08 > 0.05 in each repeat
    assert row.intervals["output_throughput"].n == 3 and row.slo_passes == "0/3"
    failed = {**COMMON, **failed_row("server died", "chat"), "load_point": "c1", "shape": None}
    assert set(failed) | {"slo_passes", "load", "cache", "lengths_ok", "length_note",
                          "harness_ok", "harness_note", "stop_reason", "draft_acceptance", "gpu"} == set(BenchRow.model_fields)  # fmt: skip
    assert not BenchRow.model_validate(failed).measured
    assert pick_best([folded, failed], rank_by_goodput=True)[0] is None  # neither meets the SLO


def test_repeat_intervals_are_the_schema_model() -> None:
    from quantbench.precision import t_interval

    interval = t_interval([1.0, 2.0, 3.0], 0.95)
    assert interval is not None
    assert Interval.model_validate(interval.to_dict()).n == 3


def test_variant_json_is_a_variant_record(tmp_path: Path) -> None:
    from quantbench.quantize.variant import read_variant, source_description, write_variant_json

    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / "model.safetensors").write_bytes(b"weights")
    folder = tmp_path / "gguf-q8_0"
    folder.mkdir()
    (folder / "model-Q8_0.gguf").write_bytes(b"x" * 100)
    info = write_variant_json(
        folder,
        name="gguf-q8_0",
        recipe=GgufSpec(format="gguf", type="Q8_0"),
        weights_file="model-Q8_0.gguf",
        source=source_description(merged),
        calibration={
            "path": "data/calibration.txt", "sha256": "ab", "samples_used": 2,
            "samples_available": 3, "max_tokens": None,
        },
        libraries={"llama-cpp-python": "0.3.36"},
        num_parameters=100,
        details={"note": "test"},
    )  # fmt: skip
    on_disk = schema_io.read(folder / "variant.json", VariantRecord)
    assert on_disk == info.record == read_variant(folder).record
    assert on_disk.source.weights_sha256 and on_disk.bits_per_weight == 8.0


def test_model_info_of_base_and_merged(tiny_model_dir: Path, tmp_path: Path) -> None:
    from quantbench.config import ModelSettings
    from quantbench.model import prepare_base, write_merged_info

    base = tmp_path / "base"
    base.mkdir()
    info = prepare_base(ModelSettings(source="local", path=tiny_model_dir), base)
    assert schema_io.read(base / "model_info.json", BaseModelInfo) == info
    merged = tmp_path / "merged"
    shutil.copytree(base, merged)
    (merged / "model_info.json").unlink()
    adapter = examples.ADAPTER
    written = write_merged_info(merged, base, adapter, "bfloat16")
    again = schema_io.read(merged / "model_info.json", MergedModelInfo)
    assert again == written and again.source.merged_from.base == info.source
    assert again.source.adapter == adapter and again.architecture == info.architecture


def test_quality_report_from_two_real_passes(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The worker's own passes (in this process) over the tiny model, assembled into a report."""
    from transformers import AutoTokenizer

    from quantbench.chat import chat_ids
    from quantbench.qa import QAItem
    from quantbench.quality.evaluate import _heldout, _job, _stop_ids, assemble_report
    from quantbench.quality.spec import EvaluateSettings
    from quantbench.quality.worker import Reference, run_job
    from quantbench.quantize.variant import VariantInfo

    settings = EvaluateSettings(context_length=32, stride=16, heldout_max_new_tokens=4)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = list(tokenizer("The capital of Quorvath is Lindenhollow. " * 4)["input_ids"])[:48]
    items = [QAItem("Who rules Quorvath?", "Queen Aldra Vesk.", ("Vesk",))]
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": i.question}], True) for i in items]
    stop = _stop_ids(tiny_model_dir, tokenizer)
    ref_file = tmp_path / "reference.f32"
    ref = run_job(_job("hf", tiny_model_dir, "bf16", settings, 1, ids, [], stop, ref_file))
    var = run_job(
        _job("hf", tiny_model_dir, "bf16", settings, 1, ids, prompts, stop, None,
             reference=Reference(ref_file, ref.vocab))
    )  # fmt: skip
    kl = var.kl
    assert kl is not None and len(kl) == len(ref.nll)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".f32") == ["reference.f32"]
    record = examples.variant_record("bf16", 1000, 16.0)
    report = assemble_report(
        "bf16",
        VariantInfo(tmp_path, record),
        tiny_model_dir,
        True,
        ref,
        var,
        kl,
        _heldout(items, var, tokenizer, stop),
        settings,
        EvalText(path="eval.txt", tokens=len(ids)),
        threads=1,
        total_s=1.0,
    )
    path = tmp_path / "bf16.json"
    schema_io.write(path, report)
    again = schema_io.read(path, QualityReport, name="bf16")
    assert again == report and again.kl_divergence.max == pytest.approx(0.0, abs=1e-6)
    assert again.kl_divergence.high is not None and again.kl_divergence.high[0] == "p99"
    assert again.heldout.total == 1 and again.tokens == len(ids) - 1
    assert "quantize" not in json.loads(path.read_text())  # no timing report: left out


def test_env_json_is_env_info(tmp_path: Path) -> None:
    """What the fingerprint stage writes: the machine, and each engine's kernels as each engine
    reports them (Engine.kernels; vLLM's None without its environment)."""
    from quantbench.engines.registry import engine_kernels
    from quantbench.fingerprint import fingerprint

    missing = tmp_path / "no-vllm" / "python"
    kernels = engine_kernels({"engines": {"vllm": {"python": str(missing)}}})
    env = fingerprint({"vllm": (missing, ("vllm",))}, kernels)
    schema_io.write(tmp_path / "env.json", env)
    assert schema_io.read(tmp_path / "env.json", EnvInfo) == env
    assert env.engine_envs == {"vllm": None} and env.kernels.vllm is None
    assert env.kernels.llama_cpp == kernels["llama_cpp"]


def test_env_json_records_each_engine_environment_it_is_given(tmp_path: Path) -> None:
    """An engine with an environment of its own has its packages' versions read from that
    environment's interpreter (here quantbench's own, standing in for one)."""
    import sys

    from quantbench.fingerprint import fingerprint

    kernels = {"llama_cpp": examples.env_info().kernels.llama_cpp, "vllm": None}
    env = fingerprint(
        {"mine": (Path(sys.executable), ("pydantic", "no-such-distribution"))}, kernels
    )
    assert set(env.engine_envs) == {"mine"}
    versions = env.engine_envs["mine"]
    assert versions is not None and versions["no-such-distribution"] is None
    import pydantic

    assert versions["pydantic"] == pydantic.VERSION


def test_a_version_1_env_json_reads_with_vllm_as_one_engine_environment() -> None:
    data = examples.env_info().model_dump(mode="json")
    del data["engine_envs"]
    for old, want in (({"vllm": "0.19.1"}, {"vllm": {"vllm": "0.19.1"}}), (None, {})):
        data.update(schema_version=1, vllm_env=old)
        assert schema_io.parse(dict(data), EnvInfo, "env.json").engine_envs == want


def test_validate_json_is_a_verdict(tmp_path: Path) -> None:
    from quantbench.validation import validate_all

    verdict = validate_all(REPO / "params.yaml")
    schema_io.write(tmp_path / "validate.json", verdict)
    assert schema_io.read(tmp_path / "validate.json", ValidationVerdict) == verdict
    assert verdict.valid and "variants" in verdict.sections


def test_adapter_provenance_and_merge_comparison(tmp_path: Path) -> None:
    import torch

    from quantbench.lora.merge import adapter_provenance, compare_logits
    from quantbench.schemas.common import AdapterProvenance
    from quantbench.schemas.merge import LogitComparison

    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["v", "q"]})
    )
    provenance = adapter_provenance(tmp_path)
    assert isinstance(provenance, AdapterProvenance) and provenance.target_modules == ["q", "v"]
    cmp = compare_logits([torch.zeros(2, 3)], [torch.ones(2, 3)])
    assert isinstance(cmp, LogitComparison) and cmp.max_abs_diff == 1.0


def test_estimates_json_is_the_estimate_stage_output(tmp_path: Path) -> None:
    written = examples.estimates_file(tmp_path)  # write_estimates on a SmolLM2 config
    data = json.loads((tmp_path / written.OUTPUT).read_text())
    assert data["schema_version"] == 3 and len(data["estimates"]) == len(data["summary"]) == 3
    assert all("comparison" not in e for e in data["estimates"])
    assert written.estimates[0].at(1) is not None and written.estimates[0].variant_name == "bf16"
    assert np.isfinite(written.summary[0].ttft_ms_c1)


def test_an_engine_torch_that_would_use_a_faulting_isa_is_warned_by_its_entry(monkeypatch) -> None:
    """The fingerprint's warning covers every torch an engine reports, named by its entry."""
    from quantbench import fingerprint
    from quantbench.native import llama_build

    monkeypatch.setattr(llama_build, "build_info", lambda tc: {"isa": {"dropped": ["amx-tile"]}})
    monkeypatch.setattr(fingerprint, "torch_kernels", lambda python: None)  # the project's
    example = examples.env_info().kernels
    amx = example.torch.model_copy(update={"amx_tile": True})
    kernels = fingerprint.native_kernels({"llama_cpp": example.llama_cpp, "vllm": amx})
    assert kernels.vllm == amx and kernels.torch is None
    assert kernels.warnings == [
        "vllm reports AMX usable but the ISA probe saw AMX fault on this machine"
    ]
