"""The pinned llama.cpp toolchain: one source release, its own converter and gguf-py."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from quantbench import llamacpp


def test_root_can_be_moved_by_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(llamacpp.ROOT_ENV, str(tmp_path))
    tc = llamacpp.toolchain()
    assert tc.root == tmp_path
    assert tc.converter == (
        tmp_path
        / "src"
        / "llama_cpp_python-0.3.36"
        / "vendor"
        / "llama.cpp"
        / "convert_hf_to_gguf.py"
    )
    assert tc.bin_dir == tmp_path / "cmake" / "bin"


def test_converter_uses_the_release_gguf_py(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NO_LOCAL_GGUF", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = llamacpp.converter_env(llamacpp.toolchain(tmp_path))
    assert "NO_LOCAL_GGUF" not in env
    assert env["PYTHONPATH"].split(":")[0].endswith("vendor/llama.cpp/gguf-py")
    assert env["PYTHONPATH"].endswith("/elsewhere")


def test_a_foreign_llama_cpp_module_is_refused(tmp_path: Path) -> None:
    foreign = types.ModuleType("llama_cpp")
    foreign.__file__ = "/usr/lib/python3/site-packages/llama_cpp/__init__.py"
    foreign.__version__ = llamacpp.VERSION
    with pytest.raises(llamacpp.LlamaCppError, match="uninstall llama-cpp-python"):
        llamacpp._check_binding(foreign, llamacpp.toolchain(tmp_path))


@pytest.mark.slow
def test_bindings_load_the_pinned_build() -> None:
    module = llamacpp.load_binding()
    tc = llamacpp.toolchain()
    assert module.__version__ == llamacpp.VERSION
    assert tc.source.resolve() in Path(module.__file__).resolve().parents
    assert (tc.bin_dir / "libllama.so").is_file()
    assert tc.converter.is_file() and (tc.gguf_py / "gguf").is_dir()
