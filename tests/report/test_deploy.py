"""best_config.json's deployable command (report/deploy.py): built from each engine's real launch
in a project of its own, with its binary reached through a link as build/llama.cpp is."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest

from quantbench.engines.artifact import Artifact
from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings
from quantbench.engines.transformers import TransformersEngine, TransformersSettings
from quantbench.engines.vllm import VllmEngine, VllmSettings
from quantbench.model import embedded_gguf_path
from quantbench.report.deploy import DEFAULTS, deployable, fill
from quantbench.secrets import REDACTED

HARNESS = ("--metrics", "--slot-save-path", "--enable-prompt-tokens-details")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a variant folder, a GGUF, vLLM's interpreter and a llama.cpp build that
    lives outside the project behind a link (the machine's shared build)."""
    root = tmp_path / "project"
    (root / "models/variants/w8a8").mkdir(parents=True)
    (root / "models/variants/w8a8/config.json").write_text("{}")
    (root / "models/variants/gguf-q4_k_m").mkdir(parents=True)
    gguf = root / "models/variants/gguf-q4_k_m/model.gguf"  # a real one: launch reads its header
    try:
        os.link(embedded_gguf_path(), gguf)
    except OSError:  # another file system
        shutil.copyfile(embedded_gguf_path(), gguf)
    (root / ".venv-vllm/bin").mkdir(parents=True)
    (root / ".venv-vllm/bin/python").write_text("")
    shared = tmp_path / "machine-cache/llama.cpp"
    (shared / "cmake/bin").mkdir(parents=True)
    (shared / "cmake/bin/llama-server").write_text("")
    (root / "build").mkdir()
    (root / "build/llama.cpp").symlink_to(shared, target_is_directory=True)
    return root


def _launch(engine: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    monkeypatch.chdir(root)
    variants = root / "models/variants"
    if engine == "llamacpp":
        artifact = Artifact("gguf-q4_k_m", "gguf", variants / "gguf-q4_k_m",
                            variants / "gguf-q4_k_m/model.gguf")  # fmt: skip
        binary = (root / "build/llama.cpp/cmake/bin/llama-server").resolve()
        settings = LlamaCppSettings(binary=binary, parallel=1)
        return LlamaCppEngine(), LlamaCppEngine().launch(artifact, settings, "127.0.0.1", 41234)
    if engine == "vllm":
        artifact = Artifact("w8a8", "w8a8", variants / "w8a8")
        settings = VllmSettings(python=root / ".venv-vllm/bin/python", block_size=32)
        return VllmEngine(), VllmEngine().launch(artifact, settings, "127.0.0.1", 41234)
    artifact = Artifact("w8a8", "w8a8", variants / "w8a8")
    settings = TransformersSettings(continuous_batching=True)
    return TransformersEngine(), TransformersEngine().launch(artifact, settings, "127.0.0.1", 41234)


@pytest.mark.parametrize("engine", ["llamacpp", "vllm", "transformers"])
def test_the_deployable_command_is_the_measured_one_without_this_clone(
    engine: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng, launch = _launch(engine, project, monkeypatch)
    deploy = deployable(launch.argv, launch.env, eng, project)
    argv = deploy["argv"]
    # nothing of this clone's paths (nor of the machine's build the link points to)
    outside = (str(project), str(project.parent / "machine-cache"))
    assert not [a for a in argv if a.startswith(outside)], argv
    assert not [v for v in deploy["env"].values() if v.startswith(outside)], deploy["env"]
    # the harness's own flags and variables left out, and said so
    assert not set(HARNESS) & set(argv)
    assert "VLLM_SERVER_DEV_MODE" not in deploy["env"]
    flags = [x.split()[0] for x in deploy["left_out"] if x.startswith("-")]
    assert flags == [a for a in launch.argv if a in HARNESS]
    assert [x for x in deploy["left_out"] if not x.startswith("-")] == (
        ["VLLM_SERVER_DEV_MODE"] if engine == "vllm" else []
    )
    # the address and port the user chooses
    assert argv[argv.index("--host") + 1] == "{host}" and argv[argv.index("--port") + 1] == "{port}"
    filled = fill(deploy, "0.0.0.0", 9000)
    assert filled[filled.index("--port") + 1] == "9000" and "41234" not in filled
    # every setting that shapes the serving kept, the model relative to the project
    kept = [a for a in launch.argv if not a.startswith("/") and a not in HARNESS]
    kept = [a for a in kept if a not in ("127.0.0.1", "41234")]
    assert [a for a in argv if a in kept] == kept
    model = (
        "models/variants/gguf-q4_k_m/model.gguf" if engine == "llamacpp" else "models/variants/w8a8"
    )
    assert model in argv
    words = shlex.split(deploy["command_line"])
    assert f"${{PORT:-{DEFAULTS['port']}}}" in words
    assert deploy["model_name"] == {"llamacpp": "gguf-q4_k_m", "vllm": "w8a8"}.get(engine, model)
    if engine == "llamacpp":  # the binary through the project's link, as the user finds it
        assert argv[0] == "build/llama.cpp/cmake/bin/llama-server"
        assert deploy["left_out"][0] == "--metrics"
    if engine == "vllm":
        assert argv[0] == ".venv-vllm/bin/python" and argv[argv.index("--block-size") + 1] == "32"


def test_secrets_are_named_for_the_user_to_export_never_written(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng, launch = _launch("vllm", project, monkeypatch)
    env = {**launch.env, "HF_TOKEN": REDACTED, "MY_PASS": "x", "OMP_NUM_THREADS": "1"}
    deploy = deployable(launch.argv, env, eng, project, secret_env=["MY_PASS"])
    assert deploy["secret_env"] == ["HF_TOKEN", "MY_PASS"]
    assert "HF_TOKEN" not in deploy["env"] and "MY_PASS" not in deploy["env"]
    assert deploy["env"]["OMP_NUM_THREADS"] == "1"
    assert REDACTED not in deploy["command_line"]


def test_an_engine_this_process_does_not_know_keeps_its_command_whole(project: Path) -> None:
    argv = [str(project / "bin/server"), "--metrics", "--host", "127.0.0.1", "--port", "5"]
    deploy = deployable(argv, {}, None, project)
    assert deploy["argv"] == ["bin/server", "--metrics", "--host", "{host}", "--port", "{port}"]
    assert deploy["left_out"] == []


def test_the_report_keeps_the_command_of_an_engine_it_does_not_know() -> None:
    # a plugin engine the report process has not loaded: its command kept whole, no failure
    from quantbench.report.deploy import engine_or_none

    assert engine_or_none("no-such-engine") is None and engine_or_none("vllm") is not None
