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
import logging
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from quantbench.formats.base import Format, Recipe
from quantbench.formats.build import BuildRequest, BuildResult
from quantbench.formats.gguf_header import read_header
from quantbench.formats.registry import register_format
from quantbench.native import llama_build as llamacpp
from quantbench.native.llama_log import captured
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

# A GGUF variant is one file (Format.file_suffix): engines and the estimator are handed it.
SUFFIX = ".gguf"

# Types that the converter writes itself: no quantize step after conversion.
GGUF_CONVERTER_TYPES = {"F16": "f16", "BF16": "bf16"}

log = logging.getLogger(__name__)


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
    return f"model-{gguf_type}{SUFFIX}"


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


@dataclass(frozen=True)
class QuantizeSummary:
    """What llama.cpp's quantizer said it did, read from its log."""

    tensors: int | None = None
    fallback_to: dict[str, int] = field(default_factory=dict)
    """Per type a tensor fell back to (its rows do not fit the asked type's blocks)."""
    source_mib: float | None = None
    quantized_mib: float | None = None

    @property
    def fallback_tensors(self) -> int:
        return sum(self.fallback_to.values())

    def details(self) -> dict[str, Any]:
        """For variant.json: how many tensors fell back to another type, and to which (the file's
        size is recorded there already)."""
        if self.tensors is None:
            return {}
        return {
            "tensors": self.tensors,
            "fallback_tensors": self.fallback_tensors,
            "fallback_to": dict(sorted(self.fallback_to.items())),
        }

    def line(self, gguf_type: str) -> str:
        sizes = (
            f" ({self.source_mib:.1f} -> {self.quantized_mib:.1f} MiB of tensors)"
            if self.source_mib is not None and self.quantized_mib is not None
            else ""
        )
        text = f"llama.cpp quantized {self.tensors or '?'} tensors to {gguf_type}{sizes}"
        if self.fallback_tensors:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.fallback_to.items()))
            text += (
                f"; {self.fallback_tensors} of them in another type ({kinds}), their rows not a "
                f"multiple of {gguf_type}'s block"
            )
        return text


_SIZE = re.compile(r"(model|quant) size\s*=\s*([\d.]+) MiB")
_FALLBACK_TO = re.compile(r"falling back to\s+(\w+)")
_TENSOR = re.compile(r"^\[\s*\d+/\s*(\d+)\]")


def read_summary(lines: list[str]) -> QuantizeSummary:
    """The quantizer's own account of a run (llama_model_quantize's log lines)."""
    sizes: dict[str, float] = {}
    tensors = None
    kinds: Counter[str] = Counter()
    for line in lines:
        if m := _SIZE.search(line):
            sizes[m.group(1)] = float(m.group(2))
        elif m := _FALLBACK_TO.search(line):
            kinds[m.group(1)] += 1
        elif m := _TENSOR.match(line.strip()):
            tensors = int(m.group(1))
    return QuantizeSummary(
        tensors=tensors,
        fallback_to=dict(kinds),
        source_mib=sizes.get("model"),
        quantized_mib=sizes.get("quant"),
    )


def quantize(src: Path, dst: Path, gguf_type: str, threads: int) -> QuantizeSummary:
    """llama_model_quantize(src -> dst) to `gguf_type` through the pinned bindings. Its log (the
    loader's metadata, a line per tensor: hundreds of lines) is kept out of the stage's output;
    one line says what it did, the whole log goes to the debug log and into an error."""
    llama_cpp = llamacpp.load_binding()
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{gguf_type}", None)
    if ftype is None:
        raise GgufBuildError(f"llama-cpp-python {llamacpp.VERSION} has no file type {gguf_type}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    with captured(llama_cpp) as native_log:
        status = llama_cpp.llama_model_quantize(
            str(src).encode(), str(dst).encode(), ctypes.byref(params)
        )
    log.debug("llama_model_quantize's log:\n%s", native_log.text)
    if status != 0 or not dst.is_file():
        raise GgufBuildError(
            f"llama_model_quantize to {gguf_type} failed (status {status}); the end of its "
            f"log:\n{native_log.tail()}"
        )
    summary = read_summary(native_log.lines())
    log.info("%s", summary.line(gguf_type))
    return summary


class Gguf(Format):
    name: ClassVar[str] = "gguf"
    libraries: ClassVar[tuple[str, ...]] = ("torch", "transformers", "numpy")
    recipe_model: ClassVar[type[Recipe]] = GgufSpec
    quality_backend: ClassVar[str] = "gguf"
    file_suffix: ClassVar[str | None] = SUFFIX

    def build(self, request: BuildRequest) -> BuildResult:
        return build_gguf(request)

    def validate_against_model(self, name: str, recipe: Recipe, arch: Any) -> None:
        return None  # llama.cpp falls back to another type where a row does not fit its blocks

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        return Path(folder).suffix == SUFFIX or any(Path(folder).glob(f"*{SUFFIX}"))

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        if isinstance(recipe, GgufSpec):
            return {"format": "gguf", "gguf_type": recipe.type.upper()}
        return {"format": "gguf", "gguf_type": gguf_file_type(path) if path else None}


def gguf_hparams(path: Path, *names: str) -> dict[str, int]:
    """Integer hyperparameters from a GGUF file's metadata (no tensor data is read), by their
    names without the architecture prefix: ``block_count``, ``attention.head_count_kv``, ..."""

    header = read_header(path)
    return {name: int(header.hparam(name)) for name in names}


def gguf_file_type(path: Path) -> str | None:
    """The llama.cpp file type (e.g. ``Q4_K_M``) recorded in a GGUF file, if any."""
    from gguf.constants import LlamaFileType

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
        summary = QuantizeSummary()
        if spec.type in GGUF_CONVERTER_TYPES:
            shutil.move(intermediate, target)
        else:
            summary = quantize(intermediate, target, spec.type, request.threads)
    libraries = {"llama-cpp-python": f"{llamacpp.VERSION} (source build)"}
    return BuildResult(
        target.name,
        libraries=libraries,
        details={
            "intermediate": spec.intermediate,
            "converter": "convert_hf_to_gguf.py",
            **summary.details(),
        },
    )


register_format(Gguf())
