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

from quantbench.native import llama_build as llamacpp
from quantbench.quantize.common import BuildRequest, BuildResult
from quantbench.quantize.spec import GGUF_CONVERTER_TYPES, GgufSpec
from quantbench.runtime import thread_env


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
