"""``reports/code/<kind>/<name>.json`` (stage ``validate``): the code of one engine or format.

DVC's ``foreach`` stages are keyed by one format (``quantize@``, ``evaluate@``) or one engine
(``bench@``), and each must rerun when the code of *its* format or engine changes, and only then.
A path in dvc.yaml cannot name that code for a plugin (``src/quantbench/formats/${item.format}.py``
does not exist for a format defined in ``plugins/``), so the ``validate`` stage, which loads the
registries with the plugins, writes one stamp per registered engine and format: the file that
defines it, the files it declares it runs (``code_files``), and their hashes. The keyed stages depend on their stamp
(``reports/code/formats/${item.format}.json``); a stamp's bytes change only when its file does.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, version


class CodeStamp(StageOutput):
    """One registered engine's or format's defining module and the hash of its file."""

    OUTPUT: ClassVar[str] = "reports/code/{kind}/{name}.json"
    STAGE: ClassVar[str] = "validate"
    MIGRATIONS: ClassVar[Migrations] = {}

    schema_version: Literal[1] = version(1)
    kind: Literal["engines", "formats"] = Field(description="Which registry holds it.")
    name: str = Field(
        description="Its name in that registry (a variant's format, a pair's engine)."
    )
    module: str = Field(description="The module that defines it (a plugin's as it was imported).")
    file: str = Field(
        description="That module's file: relative to the project where it lies inside it, else "
        "absolute (a plugin installed elsewhere)."
    )
    sha256: str = Field(description="The file's SHA-256: what makes the stamp change.")
    code_files: dict[str, str] = Field(
        default_factory=dict,
        description="Files besides the module that its code runs or reads (its ``code_files``: a "
        "plugin engine's server script, its requirements), each with its SHA-256.",
    )
    builtin: bool = Field(description="A built-in one (src/quantbench), not a plugin's.")


__all__ = ["CodeStamp"]
