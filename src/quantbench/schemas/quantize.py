"""``reports/quantize/<name>.json`` (stage ``quantize@<name>``): how long a variant took to build.

Kept out of ``variant.json`` so the variant folder stays byte-identical across runs; the
``evaluate@<name>`` stage copies it into the quality report (``quantize``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, stamp, version


class QuantizeTiming(StageOutput):
    """Wall times of one variant's build."""

    OUTPUT: ClassVar[str] = "reports/quantize/{name}.json"
    STAGE: ClassVar[str] = "quantize@{name}"
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1)}

    schema_version: Literal[1] = version(1)
    name: str
    format: str
    threads: int = Field(description="runtime.threads the build ran with.")
    size_bytes: int = Field(description="Bytes of the variant folder.")
    quantize_s: float = Field(description="The format's quantizer, seconds.")
    describe_s: float = Field(description="Hashing the folder into variant.json, seconds.")


__all__ = ["QuantizeTiming"]
