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
