"""variant.json: what a variant folder holds and how it was made.

Written last into the variant's folder: format, the recipe exactly as validated, calibration set
and its hash, the libraries that did the work, each file's size and sha256, and the source
model's hash. It holds nothing that changes between two runs on the same inputs (no times, no
host names, no temporary paths), so quantizing twice gives byte-identical folders; wall times go
to the stage's separate timing report instead. Its schema is
:class:`quantbench.schemas.variant.VariantRecord`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from quantbench.formats.registry import get_format
from quantbench.fsutil import sha256_file, sha256_tree
from quantbench.schemas import io as schema_io
from quantbench.schemas.variant import Calibration, FileEntry, VariantRecord, VariantSource

VARIANT_JSON = "variant.json"


@dataclass
class VariantInfo:
    """A variant folder and its variant.json, plus the build's wall times (kept out of the file)."""

    directory: Path
    record: VariantRecord
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def format(self) -> str:
        return self.record.format

    @property
    def weights_file(self) -> str:
        return self.record.weights_file

    @property
    def size_bytes(self) -> int:
        return self.record.size_bytes

    @property
    def weights_path(self) -> Path:
        return self.directory / self.weights_file


def library_versions(fmt: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The installed versions of what shaped this format's output (``Format.libraries``)."""
    versions: dict[str, str] = {}
    for dist in get_format(fmt).libraries:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    versions.update(extra or {})
    return dict(sorted(versions.items()))


def file_table(directory: Path) -> dict[str, FileEntry]:
    """Every file in the folder (except variant.json itself) with its size and sha256."""
    table: dict[str, FileEntry] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel == VARIANT_JSON:
            continue
        table[rel] = FileEntry(bytes=path.stat().st_size, sha256=sha256_file(path))
    return table


def source_description(merged_dir: Path) -> VariantSource:
    """The merged model the variant was made from: its folder hash and its weights' hashes."""
    weights = sorted(p for p in merged_dir.glob("*.safetensors"))
    return VariantSource(
        path=merged_dir.as_posix(),
        sha256=sha256_tree(merged_dir),
        weights_sha256={p.name: sha256_file(p) for p in weights},
    )


def write_variant_json(
    directory: Path,
    *,
    name: str,
    recipe: Any,
    weights_file: str,
    source: VariantSource | dict[str, Any],
    calibration: Calibration | dict[str, Any] | None,
    libraries: dict[str, str],
    num_parameters: int | None,
    details: dict[str, Any] | None = None,
) -> VariantInfo:
    """Describe a finished variant folder in variant.json and return the description."""
    files = file_table(directory)
    if weights_file not in files:
        raise RuntimeError(
            f"variant {name!r}: the quantizer wrote no {weights_file} in {directory}"
        )
    weights_bytes = files[weights_file].bytes
    record = VariantRecord(
        name=name,
        format=recipe.format,
        recipe=recipe.model_dump(mode="json"),
        gguf_type=getattr(recipe, "type", None),
        calibration=Calibration.model_validate(calibration) if calibration is not None else None,
        libraries=libraries,
        source=VariantSource.model_validate(source),
        weights_file=weights_file,
        files=files,
        size_bytes=sum(entry.bytes for entry in files.values()),
        weights_bytes=weights_bytes,
        # Whole weights file over the source's parameter count: embeddings and norms included,
        # so it is comparable across formats (llama.cpp prints the same ratio as "BPW").
        bits_per_weight=round(weights_bytes * 8 / num_parameters, 3) if num_parameters else None,
        details=details or {},
    )
    schema_io.write(directory / VARIANT_JSON, record)
    return VariantInfo(directory, record)


def read_variant(directory: str | Path) -> VariantInfo:
    """Load a variant folder's variant.json (the quality harness starts here).

    A missing file raises MissingOutputError (a FileNotFoundError); one that is not a valid
    VariantRecord raises a UserError naming the stage to rerun."""
    directory = Path(directory)
    record = schema_io.read(directory / VARIANT_JSON, VariantRecord, name=directory.name)
    return VariantInfo(directory, record)
