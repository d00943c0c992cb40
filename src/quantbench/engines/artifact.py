"""What an engine is asked to serve: a model folder (or a one-file variant: a GGUF) and its
format."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quantbench.errors import UserError
from quantbench.formats.registry import all_formats, detect, format_of_file, variant_file


@dataclass(frozen=True)
class Artifact:
    """A servable model: its name (the variant's), format, folder, and its one file where its
    format's variants are one file (``Format.file_suffix``: a .gguf)."""

    name: str
    format: str
    path: Path
    weights_file: Path | None = None

    @property
    def weights(self) -> Path:
        """What the engine loads: the variant's one file (llama.cpp's GGUF), else the folder."""
        return self.weights_file if self.weights_file is not None else self.path


def load_artifact(path: str | Path, name: str | None = None) -> Artifact:
    """Describe a variant folder (with variant.json), a plain HF folder, or a one-file variant
    (a .gguf file)."""
    path = Path(path)
    single = format_of_file(path) if path.is_file() else None
    if single is not None:
        return Artifact(name or path.stem, single.name, path.parent, path)
    suffixes = sorted({f.file_suffix for f in all_formats().values() if f.file_suffix})
    files = " or ".join(f"{s} file" for s in suffixes)
    if not path.is_dir():
        raise UserError(
            f"{path}: no such model folder or {files}; run the pipeline first (make repro) "
            "or give the folder of a variant under models/variants/"
        )
    name = name or path.name
    if not any((path / f).is_file() for f in ("variant.json", "config.json")) and not any(
        any(path.glob(f"*{s}")) for s in suffixes
    ):
        raise UserError(f"{path}: neither variant.json, config.json nor a {files} inside")
    fmt = detect(path)  # the one format detector (quantbench.formats.registry)
    return Artifact(name, fmt, path, variant_file(path, fmt))
