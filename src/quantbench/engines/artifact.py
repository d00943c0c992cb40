"""What an engine is asked to serve: a model folder (or GGUF file) and its format."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quantbench.errors import UserError
from quantbench.formats.registry import detect


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
    if not any((path / f).is_file() for f in ("variant.json", "config.json")) and not any(
        path.glob("*.gguf")
    ):
        raise UserError(f"{path}: neither variant.json, config.json nor a .gguf file inside")
    fmt = detect(path)  # the one format detector (quantbench.formats.registry)
    gguf = None
    if fmt == "gguf":
        files = sorted(path.glob("*.gguf"))
        if len(files) != 1:
            raise UserError(f"{path}: expected exactly one .gguf file, found {len(files)}")
        gguf = files[0]
    return Artifact(name, fmt, path, gguf)
