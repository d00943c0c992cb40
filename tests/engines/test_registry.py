"""Which engine serves which format, valid pairs, refused pairs, and argv built without a shell."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.engines.artifact import Artifact, load_artifact
from quantbench.engines.llamacpp import LlamaCppSettings
from quantbench.engines.registry import check_pair, engine_settings, engines_for, valid_pairs
from quantbench.engines.transformers import TransformersEngine, TransformersSettings
from quantbench.errors import UserError


def test_formats_per_engine() -> None:
    assert engines_for("gguf") == ["llamacpp"]
    assert set(engines_for("bf16")) == {"transformers", "vllm"}
    assert set(engines_for("gptq")) == {"transformers", "vllm"}
    assert set(engines_for("awq")) == {"transformers", "vllm"}


def test_impossible_pair_names_the_engines_that_serve_the_format() -> None:
    with pytest.raises(UserError) as info:
        check_pair("gguf-q8_0", "gguf", "vllm")
    assert "cannot serve variant 'gguf-q8_0' (format gguf)" in str(info.value)
    assert "engines that serve gguf: llamacpp" in str(info.value)
    with pytest.raises(UserError, match="unknown engine 'tgi'"):
        check_pair("bf16", "bf16", "tgi")


def test_valid_pairs_skip_disabled_engines() -> None:
    settings = {
        "transformers": engine_settings("transformers", None),
        "vllm": engine_settings("vllm", {"enabled": False}),
        "llamacpp": engine_settings("llamacpp", {}),
    }
    pairs = valid_pairs({"bf16": "bf16", "gguf-q8_0": "gguf", "awq-w4g64": "awq"}, settings)
    assert pairs == [
        ("bf16", "transformers"),
        ("gguf-q8_0", "llamacpp"),
        ("awq-w4g64", "transformers"),
    ]


def test_transformers_argv_is_a_list_with_settings_and_thread_env(tmp_path) -> None:
    settings = TransformersSettings(
        threads=3, continuous_batching=True, cb_num_blocks=64, extra_args=["--compile"]
    )
    launch = TransformersEngine().launch(
        Artifact("bf16", "bf16", tmp_path), settings, "127.0.0.1", 9
    )
    assert isinstance(launch.argv, list) and launch.argv[1] == "serve"
    assert launch.argv[launch.argv.index("--cb-num-blocks") + 1] == "64"
    assert "--continuous-batching" in launch.argv and launch.argv[-1] == "--compile"
    assert launch.env["OMP_NUM_THREADS"] == "3"
    assert launch.model_name == str(tmp_path.resolve())  # transformers serve wants the exact path
    assert launch.base_url == "http://127.0.0.1:9"


def test_missing_llama_server_says_how_to_build_it(tmp_path) -> None:
    from quantbench.engines.llamacpp import LlamaCppEngine

    settings = LlamaCppSettings(binary=tmp_path / "nope")
    artifact = Artifact("q", "gguf", tmp_path, tmp_path / "m.gguf")
    with pytest.raises(UserError, match="make llamacpp"):
        LlamaCppEngine().launch(artifact, settings, "127.0.0.1", 1)


def test_artifact_format_detection(tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf/config.json").write_text('{"quantization_config": {"quant_method": "gptq"}}')
    assert load_artifact(tmp_path / "hf").format == "gptq"
    (tmp_path / "g").mkdir()
    (tmp_path / "g/model.gguf").write_bytes(b"GGUF")
    artifact = load_artifact(tmp_path / "g")
    assert artifact.format == "gguf" and artifact.weights == tmp_path / "g/model.gguf"
    with pytest.raises(UserError, match="no such model folder"):
        load_artifact(tmp_path / "missing")


def test_a_one_file_variant_is_served_from_its_file_and_its_folder(tmp_path: Path) -> None:
    """Format.file_suffix: a .gguf given by itself or alone in its folder is the GGUF format's
    variant, and the engine is handed the file; two in one folder are refused."""
    file = tmp_path / "g/model-Q8_0.gguf"
    file.parent.mkdir()
    file.write_bytes(b"GGUF")
    alone = load_artifact(file)
    assert (alone.name, alone.format, alone.path, alone.weights) == (
        "model-Q8_0", "gguf", file.parent, file
    )  # fmt: skip
    (tmp_path / "g/other.gguf").write_bytes(b"GGUF")
    with pytest.raises(UserError, match="expected exactly one .gguf file, found 2"):
        load_artifact(tmp_path / "g")
    (tmp_path / "plain.txt").write_text("")
    with pytest.raises(UserError, match="no such model folder or .gguf file"):
        load_artifact(tmp_path / "plain.txt")


def test_who_serves_what_is_the_engines_to_declare() -> None:
    """Engine.formats is the one declaration; a format names no engine, and a plugin adds a
    format to an engine it does not define with also_serves (no engine module edited)."""
    from quantbench.engines import registry
    from quantbench.formats.base import Format
    from quantbench.formats.registry import all_formats

    assert not hasattr(Format, "served_by")
    assert all(not hasattr(f, "served_by") for f in all_formats().values())
    engine = registry.get_engine("llamacpp")
    assert registry.served_formats(engine) == engine.formats == {"gguf"}
    try:
        registry.also_serves("llamacpp", "ggml-old")
        assert engine.serves("ggml-old") and registry.engines_for("ggml-old") == ["llamacpp"]
        assert registry.served_formats(engine) == {"gguf", "ggml-old"}
    finally:
        registry._ALSO_SERVES.pop("llamacpp")
    assert not engine.serves("ggml-old")


def test_each_engine_reports_its_own_kernels_enabled_or_not(monkeypatch, tmp_path) -> None:
    """Engine.kernels: llama.cpp its pinned build's verdicts whether it is enabled or not (the
    GGUF format runs that build too); vLLM its environment's torch, None where it is off or not
    installed; transformers none (it runs on quantbench's torch, recorded anyway)."""
    from quantbench.engines import registry
    from quantbench.native import llama_build
    from quantbench.schemas.env import LlamaCppKernels

    info = {"cmake_flags": ["-DGGML_NATIVE=ON"], "isa": {"kept": ["avx2"], "dropped": ["amx-tile"],
            "outcomes": {"avx2": "ok"}, "arch": "znver3"}}  # fmt: skip
    monkeypatch.setattr(llama_build, "build_info", lambda tc: info)
    monkeypatch.setattr(llama_build, "mismatch", lambda found: None)
    params = {"engines": {"llamacpp": {"enabled": False}, "vllm": {"python": str(tmp_path / "no")}}}
    found = registry.engine_kernels(params)
    assert found == {
        "llama_cpp": LlamaCppKernels(
            build_fits_this_machine=True, cmake_flags=["-DGGML_NATIVE=ON"], isa_kept=["avx2"],
            isa_dropped=["amx-tile"], isa_outcomes={"avx2": "ok"}, march="znver3",
        ),
        "vllm": None,  # its environment does not exist
    }  # fmt: skip
    assert registry.get_engine("transformers").kernels(engine_settings("transformers", {})) == {}
    off = engine_settings("vllm", {"enabled": False})
    assert registry.get_engine("vllm").kernels(off) == {"vllm": None}


def test_two_engines_reporting_one_kernels_entry_are_refused(monkeypatch) -> None:
    from quantbench.engines import registry

    engine = registry.get_engine("transformers")
    monkeypatch.setattr(type(engine), "kernels", lambda self, settings: {"vllm": None})
    with pytest.raises(ValueError, match="'vllm'"):
        registry.engine_kernels({"engines": {"vllm": {"enabled": False}}})
