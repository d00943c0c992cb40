"""The formats made with llm-compressor (awq, w8a8) share one way to run it
(formats/compressor.py): each says only which modifiers its recipe stands for and what its
checkpoint is."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from quantbench.formats import awq, compressor, w8a8
from quantbench.formats.build import BuildRequest, BuildResult
from quantbench.formats.calibration import Calibration
from quantbench.formats.registry import get_format, recipe

FORMATS = Path(compressor.__file__).parent


@pytest.mark.parametrize(
    ("module", "raw", "modifiers", "details"),
    [
        (awq, {"format": "awq"}, ["AWQModifier", "QuantizationModifier"],
         {"checkpoint": "pack-quantized"}),
        (w8a8, {"format": "w8a8"}, ["SmoothQuantModifier", "GPTQModifier"],
         {"checkpoint": "int-quantized", "activations": "int8 dynamic per token"}),
    ],
)  # fmt: skip
def test_each_llm_compressor_format_builds_through_the_shared_pass(
    module: Any,
    raw: dict[str, Any],
    modifiers: list[str],
    details: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    seen: dict[str, Any] = {}

    def compress(request: BuildRequest, make: Any, details: dict[str, Any]) -> BuildResult:
        seen.update(request=request, modifiers=[type(m).__name__ for m in make()], **details)
        return BuildResult("model.safetensors", details=details)

    monkeypatch.setattr(module, "compress", compress)
    calibration = Calibration(tmp_path / "c.txt", "0" * 64, ["a passage"], 1, 8)
    request = BuildRequest(
        "v", recipe(raw), tmp_path / "merged", tmp_path / "out", calibration, threads=1
    )
    fmt = get_format(raw["format"])
    assert fmt.build(request).details == details
    assert seen == {"request": request, "modifiers": modifiers, **details}
    assert fmt.libraries == compressor.LIBRARIES


def test_only_the_shared_module_runs_oneshot_or_patches_the_pipeline() -> None:
    """No format module imports llm-compressor's oneshot or its pipeline (where the CPU
    workaround patches it) but compressor.py: the preamble is written once."""
    users = set()
    for path in sorted(FORMATS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llmcompressor"):
                names = {a.name for a in node.names}
                if "oneshot" in names or (node.module or "").startswith("llmcompressor.pipelines"):
                    users.add(path.name)
    assert users == {"compressor.py"}
