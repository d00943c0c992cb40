"""``reports/validate.json`` (stage ``validate``): params.yaml and what it points to are valid.

Written by ``stages/validate.py`` from :func:`quantbench.validation.validate_all`. It holds
nothing that changes with valid values (only the sections checked), so valid edits leave it
byte-identical. Version 1 renamed its ``version`` key to ``schema_version``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, stamp, version


class ValidationVerdict(StageOutput):
    """The verdict: valid (an invalid file stops the stage, so there is no other)."""

    OUTPUT: ClassVar[str] = "reports/validate.json"
    STAGE: ClassVar[str] = "validate"
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1, drop=("version",))}

    schema_version: Literal[1] = version(1)
    valid: Literal[True] = True
    sections: list[str] = Field(description="The params sections checked, in order.")


__all__ = ["ValidationVerdict"]
