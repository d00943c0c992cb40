"""``models/variants/<name>/variant.json`` (stage ``quantize@<name>``): what a variant folder holds.

Written last into the variant's folder by :func:`quantbench.quantize.variant.write_variant_json`:
format, the recipe exactly as validated, calibration set and its hash, the libraries that did the
work, each file's size and sha256, and the source model's hash. Nothing in it changes between
two runs on the same inputs (no times, no host names), so quantizing twice gives byte-identical
folders; wall times go to ``reports/quantize/<name>.json`` (:mod:`quantbench.schemas.quantize`).

This file carried ``schema_version: 1`` before the schemas package existed; it is unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import StageOutput, Strict, version


class FileEntry(Strict):
    bytes: int
    sha256: str


class VariantSource(Strict):
    """The model the variant was made from (models/merged in the pipeline)."""

    path: str
    sha256: str | None = Field(None, description="Hash of the whole source folder, if known.")
    weights_sha256: dict[str, str] = Field(
        default_factory=dict, description="Each *.safetensors file of the source -> its sha256."
    )


class Calibration(Strict):
    """The calibration text a recipe used (quantbench.formats.calibration)."""

    path: str
    sha256: str
    samples_used: int
    samples_available: int
    max_tokens: int | None = Field(description="Token limit per passage (None: none).")


class VariantRecord(StageOutput):
    """How a variant was made, and what its folder holds."""

    OUTPUT: ClassVar[str] = "models/variants/{name}/variant.json"
    STAGE: ClassVar[str] = "quantize@{name}"

    schema_version: Literal[1] = version(1)
    name: str
    format: str = Field(description="The variant's format (bf16, gptq, awq, gguf, ...).")
    recipe: dict[str, Any] = Field(description="variants.<name> of params as validated.")
    gguf_type: str | None = Field(description="The llama.cpp file type of a gguf recipe.")
    calibration: Calibration | None
    libraries: dict[str, str] = Field(description="Distribution -> version that did the work.")
    source: VariantSource
    weights_file: str = Field(description="The weights file an engine loads, in the folder.")
    files: dict[str, FileEntry] = Field(description="Every file but variant.json itself.")
    size_bytes: int = Field(description="Bytes of every file in the folder.")
    weights_bytes: int = Field(description="Bytes of weights_file.")
    bits_per_weight: float | None = Field(
        description="weights_bytes * 8 / the source's parameter count (None: count unknown)."
    )
    details: dict[str, Any] = Field(description="What the format's builder adds (e.g. a log).")


__all__ = ["Calibration", "FileEntry", "VariantRecord", "VariantSource"]
