"""variant.json: what a variant folder holds and how it was made.

Written last into the variant's folder: format, the recipe exactly as validated, calibration set
and its hash, the libraries that did the work, each file's size and sha256, and the source
model's hash. It holds nothing that changes between two runs on the same inputs (no times, no
host names, no temporary paths), so quantizing twice gives byte-identical folders; wall times go
to the stage's separate timing report instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from quantbench.fsutil import sha256_file, sha256_tree, write_json

VARIANT_JSON = "variant.json"
SCHEMA_VERSION = 1

# Which installed distributions shaped each format's output (recorded with their versions).
LIBRARIES: dict[str, tuple[str, ...]] = {
    "bf16": ("safetensors",),
    "gptq": ("gptqmodel", "torch", "transformers", "safetensors"),
    "awq": ("llmcompressor", "compressed-tensors", "torch", "transformers", "safetensors"),
    "gguf": ("torch", "transformers", "numpy"),
}


@dataclass
class VariantInfo:
    """The parsed variant.json, plus the build's wall times (kept out of the file)."""

    name: str
    format: str
    directory: Path
    weights_file: str
    size_bytes: int
    data: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def weights_path(self) -> Path:
        return self.directory / self.weights_file


def library_versions(fmt: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    versions: dict[str, str] = {}
    for dist in LIBRARIES.get(fmt, ()):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    versions.update(extra or {})
    return dict(sorted(versions.items()))


def file_table(directory: Path) -> dict[str, dict[str, Any]]:
    """Every file in the folder (except variant.json itself) with its size and sha256."""
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel == VARIANT_JSON:
            continue
        table[rel] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    return table


def source_description(merged_dir: Path) -> dict[str, Any]:
    """The merged model the variant was made from: its folder hash and its weights' hashes."""
    weights = sorted(p for p in merged_dir.glob("*.safetensors"))
    return {
        "path": merged_dir.as_posix(),
        "sha256": sha256_tree(merged_dir),
        "weights_sha256": {p.name: sha256_file(p) for p in weights},
    }


def write_variant_json(
    directory: Path,
    *,
    name: str,
    recipe: Any,
    weights_file: str,
    source: dict[str, Any],
    calibration: dict[str, Any] | None,
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
    size = sum(entry["bytes"] for entry in files.values())
    weights_bytes = files[weights_file]["bytes"]
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "format": recipe.format,
        "recipe": recipe.model_dump(mode="json"),
        "gguf_type": getattr(recipe, "type", None),
        "calibration": calibration,
        "libraries": libraries,
        "source": source,
        "weights_file": weights_file,
        "files": files,
        "size_bytes": size,
        "weights_bytes": weights_bytes,
        # Whole weights file over the source's parameter count: embeddings and norms included,
        # so it is comparable across formats (llama.cpp prints the same ratio as "BPW").
        "bits_per_weight": round(weights_bytes * 8 / num_parameters, 3) if num_parameters else None,
        "details": details or {},
    }
    write_json(directory / VARIANT_JSON, data)
    return VariantInfo(name, recipe.format, directory, weights_file, size, data)


def read_variant(directory: str | Path) -> VariantInfo:
    """Load a variant folder's variant.json (the quality harness starts here)."""
    directory = Path(directory)
    path = directory / VARIANT_JSON
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory} has no {VARIANT_JSON}: not a finished variant (run `dvc repro quantize`)"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    return VariantInfo(
        name=data["name"],
        format=data["format"],
        directory=directory,
        weights_file=data["weights_file"],
        size_bytes=int(data["size_bytes"]),
        data=data,
    )
