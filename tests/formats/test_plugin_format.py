"""A format defined outside src/ reaches the quality harness through its own module: which
backend reads it, and how its checkpoint loads (GPTQ's GPTQModel path lives in formats/gptq.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from quantbench.formats import registry
from quantbench.formats.base import Format, Recipe
from quantbench.formats.build import BuildRequest, BuildResult


class TinySpec(Recipe):
    format: Literal["tinyfmt"]


class Loaded:
    """What the format's loader returns: the harness only needs eval() here."""

    evaluated = False

    def eval(self) -> Loaded:
        self.evaluated = True
        return self


class TinyFormat(Format):
    name: ClassVar[str] = "tinyfmt"
    recipe_model: ClassVar[type[Recipe]] = TinySpec
    quality_backend: ClassVar[str] = "hf"
    loaded: ClassVar[list[tuple[Path, Any]]] = []

    def build(self, request: BuildRequest) -> BuildResult:  # pragma: no cover - not built here
        raise NotImplementedError

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        return False

    def load_hf_model(self, model_dir: Path, dtype: Any) -> Any:
        self.loaded.append((model_dir, dtype))
        return Loaded()


@pytest.fixture
def tiny_format():
    fmt = registry.register_format(TinyFormat())
    yield fmt
    registry._REGISTERED.pop(fmt.name, None)


def test_the_quality_backend_loads_a_checkpoint_the_way_its_format_says(tmp_path, tiny_format):
    import torch

    from quantbench.quality.backends import HFBackend

    backend = HFBackend.load(tmp_path, "tinyfmt", "float32")
    assert isinstance(backend.model, Loaded) and backend.model.evaluated
    assert TinyFormat.loaded == [(tmp_path, torch.float32)]


def test_each_builtin_format_names_the_backend_that_reads_it() -> None:
    # evaluate picks the backend from the format (it was a hard-coded 'gguf or hf')
    backends = {name: fmt.quality_backend for name, fmt in registry.all_formats().items()}
    assert backends == {
        "gguf": "gguf", "gptq": "hf", "awq": "hf", "w8a8": "hf", "rtn": "hf", "bf16": "hf",
    }  # fmt: skip


def test_a_plugin_registers_a_quality_backend_its_format_names(tmp_path, tiny_format) -> None:
    """The backends are a registry: a format may name one a plugin registered; an unknown name
    is refused with the known ones."""
    from quantbench.errors import UserError
    from quantbench.quality import backends

    loaded: list[tuple] = []
    kind = backends.register_backend(
        backends.BackendKind(
            "tinyrt", "a plugin's runtime", lambda *args: loaded.append(args) or Loaded()
        )
    )
    try:
        assert "tinyrt" in backends.backend_names()
        model = backends.get_backend("tinyrt").load(tmp_path, "tinyfmt", "float32", 64, 1)
        assert isinstance(model, Loaded) and loaded == [(tmp_path, "tinyfmt", "float32", 64, 1)]
        assert not kind.reads_file and not kind.torch_threads
    finally:
        backends._BACKENDS.pop("tinyrt")
    with pytest.raises(UserError, match="unknown quality backend 'tinyrt'.*known: hf, gguf"):
        backends.get_backend("tinyrt")


def test_a_plugin_format_declares_a_built_in_engine_that_serves_it() -> None:
    """engines.registry.also_serves: the fp16 plugin (an HF checkpoint) is served by
    transformers without the transformers module naming it; vLLM, which it does not name, does
    not serve it."""
    import subprocess
    import sys

    code = f"""
from pathlib import Path
from quantbench.params import import_plugins
from quantbench.engines.registry import engines_for, get_engine
assert not get_engine("transformers").serves("fp16")
import_plugins([{str(Path(__file__).with_name("fp16_plugin.py"))!r}])
assert get_engine("transformers").serves("fp16") and not get_engine("vllm").serves("fp16")
assert "transformers" in engines_for("fp16") and not get_engine("transformers").serves("nope")
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
