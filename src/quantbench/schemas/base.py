"""What every stage-output schema shares: strict models, a version, the file and the stage.

A stage output's model is the file's contract between the stage that writes it and everything
that reads it (later stages, the report, the tests). So the models are strict (``extra="forbid"``:
a field the schema does not know is an error, in the writer as in the reader), and each top-level
model carries

* ``schema_version``: a ``Literal`` of the current version (its default), so a file of another
  version can only be read through :func:`quantbench.schemas.io.read`, which migrates or refuses;
* ``OUTPUT`` and ``STAGE``: the file and the DVC stage that writes it, as templates over the
  names that vary (``reports/quality/{name}.json``, ``evaluate@{name}``), for messages that say
  exactly what to rerun;
* ``MIGRATIONS``: ``{old version: function}``, each turning the parsed JSON of that version into
  the next version's.

A file written before the schemas existed has no ``schema_version``; it counts as version 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import Field

# the strict base of every schema's parts, below the schemas (quantbench.precision's figures are
# such parts, and the schemas store them)
from quantbench.strict import Strict

Migration = Callable[[dict[str, Any]], dict[str, Any]]
Migrations = Mapping[int, Migration]

VERSION_KEY = "schema_version"
UNVERSIONED = 0
"""The version of a file that has no ``schema_version`` (written before the schemas)."""


class _Names(dict[str, str]):
    """Template names that were not given stay visible as ``<name>``."""

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


class StageOutput(Strict):
    """A whole stage output file. Subclasses declare ``schema_version`` with :func:`version`."""

    OUTPUT: ClassVar[str] = ""
    """The file, relative to the repository root, as a template (``{name}`` etc.)."""
    STAGE: ClassVar[str] = ""
    """The DVC stage that writes it, as a template (``evaluate@{name}``)."""
    MIGRATIONS: ClassVar[Migrations] = {}
    """Old version -> function turning that version's JSON into the next version's."""

    @classmethod
    def current_version(cls) -> int:
        field = cls.model_fields.get(VERSION_KEY)
        if field is None or not isinstance(field.default, int):
            raise TypeError(f"{cls.__name__} declares no schema_version")
        return int(field.default)

    @classmethod
    def output(cls, **names: Any) -> str:
        return cls.OUTPUT.format_map(_Names({k: str(v) for k, v in names.items()}))

    @classmethod
    def stage(cls, **names: Any) -> str:
        return cls.STAGE.format_map(_Names({k: str(v) for k, v in names.items()}))

    @classmethod
    def rerun(cls, **names: Any) -> str:
        """The command that writes this output again."""
        return f"dvc repro {cls.stage(**names)}"

    @classmethod
    def readable_versions(cls) -> list[int]:
        """Every version a file may have and still be read (migrated where older)."""
        current = cls.current_version()
        versions = [current]
        v = current - 1
        while v >= UNVERSIONED and v in cls.MIGRATIONS:
            versions.insert(0, v)
            v -= 1
        return versions


def version(current: int) -> Any:
    """The ``schema_version`` field of a stage output at version ``current``."""
    return Field(
        current,
        description="Version of this file's schema; older files are migrated on reading where "
        "a migration exists (quantbench.schemas.io.read), otherwise the stage is rerun.",
    )


def stamp(
    to_version: int,
    *,
    drop: tuple[str, ...] = (),
    nested: Callable[[dict[str, Any]], None] | None = None,
) -> Migration:
    """A migration that only adds the version (dropping the keys that stood for it before).

    ``nested`` may fix up parts in place (e.g. a copied file inside this one).
    """

    def migrate(data: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in data.items() if k not in drop}
        out[VERSION_KEY] = to_version
        if nested is not None:
            nested(out)
        return out

    migrate.__doc__ = f"Add schema_version {to_version}" + (
        f" (replacing {', '.join(drop)})" if drop else ""
    )
    return migrate


__all__ = [
    "UNVERSIONED",
    "VERSION_KEY",
    "Migration",
    "Migrations",
    "StageOutput",
    "Strict",
    "stamp",
    "version",
]
