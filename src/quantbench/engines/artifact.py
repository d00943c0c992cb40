"""What an engine is asked to serve: a model folder (or GGUF file) and its format."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from quantbench.errors import UserError

FORMATS = ("bf16", "gptq", "awq", "gguf")


@dataclass(frozen=True)
class Artifact:
    """A servable model: its name (the variant's), format, folder, and GGUF file if any."""

    name: str
    format: str
    path: Path
    gguf_file: Path | None = None

    @property
    def weights(self) -> Path:
        """What the engine loads: the GGUF file for llama.cpp, else the folder."""
        return self.gguf_file if self.gguf_file is not None else self.path


def _format_from_hf_config(folder: Path) -> str:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    quant = config.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    if not quant:
        return "bf16"
    if method == "gptq":
        return "gptq"
    if method in ("awq", "compressed-tensors"):
        return "awq"
    raise UserError(f"{folder}: unsupported quantization method {method!r} in config.json")


def load_artifact(path: str | Path, name: str | None = None) -> Artifact:
    """Describe a variant folder (with variant.json), a plain HF folder, or a .gguf file."""
    path = Path(path)
    if path.is_file() and path.suffix == ".gguf":
        return Artifact(name or path.stem, "gguf", path.parent, path)
    if not path.is_dir():
        raise UserError(
            f"{path}: no such model folder or .gguf file; run the pipeline first (make repro) "
            "or give the folder of a variant under models/variants/"
        )
    name = name or path.name
    info_path = path / "variant.json"
    if info_path.is_file():
        fmt = str(json.loads(info_path.read_text(encoding="utf-8"))["format"])
    elif any(path.glob("*.gguf")):
        fmt = "gguf"
    elif (path / "config.json").is_file():
        fmt = _format_from_hf_config(path)
    else:
        raise UserError(f"{path}: neither variant.json, config.json nor a .gguf file inside")
    if fmt not in FORMATS:
        raise UserError(f"{path}: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    gguf = None
    if fmt == "gguf":
        files = sorted(path.glob("*.gguf"))
        if len(files) != 1:
            raise UserError(f"{path}: expected exactly one .gguf file, found {len(files)}")
        gguf = files[0]
    return Artifact(name, fmt, path, gguf)
