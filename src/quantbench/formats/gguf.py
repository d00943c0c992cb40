"""GGUF with llama.cpp's own tools, from the pinned llama-cpp-python source release.

Two steps, both llama.cpp's: `convert_hf_to_gguf.py` turns the merged HF folder into an F16 (or
BF16/F32) GGUF, then `llama_model_quantize` (the library function behind `llama-quantize`,
called through the bindings so no extra executable is built; its output is byte-identical to the
tool's) writes the requested type. F16/BF16 variants are the converter's output as it is.

The GGUF's `general.name` is set to the variant name rather than derived from the source folder's
name, so the file does not change with where the merged model happens to live.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from quantbench.formats.base import Format, Recipe
from quantbench.formats.build import BuildRequest, BuildResult
from quantbench.formats.registry import register_format
from quantbench.native import llama_build as llamacpp
from quantbench.runtime import thread_env

# llama.cpp file types that `llama_model_quantize` writes from an F16/BF16/F32 GGUF without an
# importance matrix, by their upstream names (`llama-quantize --help`). The IQ1/IQ2/IQ3 types and
# Q2_K_S need an imatrix; the ternary TQ types and MXFP4/NVFP4 are for models trained for them.
GGUF_TYPES: tuple[str, ...] = (
    "F16",
    "BF16",
    "Q8_0",
    "Q6_K",
    "Q5_K_M",
    "Q5_K_S",
    "Q5_1",
    "Q5_0",
    "Q4_K_M",
    "Q4_K_S",
    "Q4_1",
    "Q4_0",
    "IQ4_NL",
    "IQ4_XS",
    "Q3_K_L",
    "Q3_K_M",
    "Q3_K_S",
    "Q2_K",
)

# Types that the converter writes itself: no quantize step after conversion.
GGUF_CONVERTER_TYPES = {"F16": "f16", "BF16": "bf16"}


class GgufSpec(Recipe):
    """llama.cpp GGUF: convert the merged model (F16 by default), then quantize to `type`."""

    format: Literal["gguf"] = Field(description="GGUF with llama.cpp's converter and quantizer.")
    type: str = Field(description=f"llama.cpp file type, one of: {', '.join(GGUF_TYPES)}.")
    intermediate: Literal["f16", "bf16", "f32"] = Field(
        "f16",
        description="Type the converter writes before quantizing (llama.cpp's usual path is f16; "
        "bf16 is exact for a bf16 model).",
    )

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: Any) -> str:
        text = str(value).strip().upper()
        if text not in GGUF_TYPES:
            raise ValueError(f"unknown GGUF type {value!r}; allowed: {', '.join(GGUF_TYPES)}")
        return text

    @model_validator(mode="after")
    def _converter_type_matches(self) -> GgufSpec:
        direct = GGUF_CONVERTER_TYPES.get(self.type)
        if direct is not None and direct != self.intermediate:
            # F16/BF16 are written by the converter itself; a different intermediate would mean
            # a lossy round trip through another float format.
            raise ValueError(
                f"type {self.type} is written by the converter directly; set intermediate: "
                f"{direct} (or leave it out)"
            )
        return self


class GgufBuildError(RuntimeError):
    """llama.cpp's converter or quantizer failed."""


def gguf_filename(gguf_type: str) -> str:
    return f"model-{gguf_type}.gguf"


def convert(merged_dir: Path, out_file: Path, outtype: str, model_name: str, threads: int) -> None:
    """Run llama.cpp's HF -> GGUF converter from the pinned release."""
    tc = llamacpp.ensure_source()
    env = {**llamacpp.converter_env(tc), **thread_env(threads)}
    cmd = [
        sys.executable, str(tc.converter), str(merged_dir),
        "--outtype", outtype, "--outfile", str(out_file), "--model-name", model_name,
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode != 0 or not out_file.is_file():
        tail = (result.stdout + result.stderr)[-4000:]
        raise GgufBuildError(f"convert_hf_to_gguf.py failed (exit {result.returncode}):\n{tail}")


def quantize(src: Path, dst: Path, gguf_type: str, threads: int) -> None:
    """llama_model_quantize(src -> dst) to `gguf_type` through the pinned bindings."""
    llama_cpp = llamacpp.load_binding()
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{gguf_type}", None)
    if ftype is None:
        raise GgufBuildError(f"llama-cpp-python {llamacpp.VERSION} has no file type {gguf_type}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(
        str(src).encode(), str(dst).encode(), ctypes.byref(params)
    )
    if status != 0 or not dst.is_file():
        raise GgufBuildError(f"llama_model_quantize to {gguf_type} failed (status {status})")


class Gguf(Format):
    name: ClassVar[str] = "gguf"
    libraries: ClassVar[tuple[str, ...]] = ("torch", "transformers", "numpy")
    recipe_model: ClassVar[type[Recipe]] = GgufSpec
    quality_backend: ClassVar[str] = "gguf"

    def build(self, request: BuildRequest) -> BuildResult:
        return build_gguf(request)

    def validate_against_model(self, name: str, recipe: Recipe, arch: Any) -> None:
        return None  # llama.cpp falls back to another type where a row does not fit its blocks

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        return Path(folder).suffix == ".gguf" or any(Path(folder).glob("*.gguf"))

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        if isinstance(recipe, GgufSpec):
            return {"format": "gguf", "gguf_type": recipe.type.upper()}
        return {"format": "gguf", "gguf_type": gguf_file_type(path) if path else None}


def gguf_hparams(path: Path, *names: str) -> dict[str, int]:
    """Integer hyperparameters from a GGUF file's metadata (no tensor data is read), by their
    names without the architecture prefix: ``block_count``, ``attention.head_count_kv``, ..."""
    from quantbench.formats.gguf_header import read_header

    header = read_header(path)
    return {name: int(header.hparam(name)) for name in names}


def gguf_file_type(path: Path) -> str | None:
    """The llama.cpp file type (e.g. ``Q4_K_M``) recorded in a GGUF file, if any."""
    from gguf.constants import LlamaFileType

    from quantbench.formats.gguf_header import read_header

    value = read_header(path).fields.get("general.file_type")
    if value is None:
        return None
    try:
        return LlamaFileType(value).name.removeprefix("MOSTLY_")
    except ValueError:
        return None


def build_gguf(request: BuildRequest) -> BuildResult:
    spec: GgufSpec = request.spec
    target = request.out_dir / gguf_filename(spec.type)
    # The intermediate lives next to the output (same file system, cleaned up either way).
    with tempfile.TemporaryDirectory(prefix=".convert-", dir=request.out_dir.parent) as tmp:
        intermediate = Path(tmp) / f"model-{spec.intermediate.upper()}.gguf"
        convert(request.merged_dir, intermediate, spec.intermediate, request.name, request.threads)
        if spec.type in GGUF_CONVERTER_TYPES:
            shutil.move(intermediate, target)
        else:
            quantize(intermediate, target, spec.type, request.threads)
    libraries = {"llama-cpp-python": f"{llamacpp.VERSION} (source build)"}
    return BuildResult(
        target.name,
        libraries=libraries,
        details={"intermediate": spec.intermediate, "converter": "convert_hf_to_gguf.py"},
    )


register_format(Gguf())
