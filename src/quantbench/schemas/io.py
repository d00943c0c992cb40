"""Read and write stage outputs through their schemas.

``write(path, model)`` writes deterministic JSON (sorted keys, indented, temp file + rename).
``read(path, Model, **names)`` parses a file into ``Model``; a file of an older
``schema_version`` (none: version 0) is migrated step by step where the schema registers
migrations, and refused otherwise with a message that names the file, both versions and the
exact command that writes it again. ``names`` fill the schema's templates (``name="gptq-w4g64"``
for ``evaluate@{name}``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from quantbench.errors import UserError
from quantbench.fsutil import write_json
from quantbench.schemas.base import UNVERSIONED, VERSION_KEY, StageOutput

M = TypeVar("M", bound=StageOutput)


class StageOutputError(UserError):
    """A stage output cannot be read as its schema: missing, unreadable or of other content."""


class MissingOutputError(StageOutputError, FileNotFoundError):
    """The file is not there: its stage has not run."""


class SchemaVersionError(StageOutputError):
    """The file has a schema version this code cannot read (and no migration bridges it)."""

    def __init__(self, message: str, *, found: int, current: int) -> None:
        super().__init__(message)
        self.found = found
        self.current = current


def write(path: str | Path, model: StageOutput) -> None:
    """Write ``model`` to ``path`` as sorted, indented JSON, atomically."""
    write_json(path, model.model_dump(mode="json"))


def version_of(data: dict[str, Any]) -> int:
    """The schema version of parsed JSON; 0 where it has none (written before the schemas)."""
    found = data.get(VERSION_KEY, UNVERSIONED)
    if isinstance(found, bool) or not isinstance(found, int):
        raise ValueError(f"{VERSION_KEY} must be an integer, not {found!r}")
    return found


def migrate(data: dict[str, Any], model: type[M], where: str, **names: Any) -> dict[str, Any]:
    """``data`` brought to ``model``'s current version, or SchemaVersionError."""
    found, current = version_of(data), model.current_version()
    if found > current:
        raise SchemaVersionError(
            f"{where}: schema version {found} is newer than this quantbench reads "
            f"({model.__name__} version {current}); update quantbench, or rerun "
            f"`{model.rerun(**names)}` to write it with this one",
            found=found,
            current=current,
        )
    version = found
    while version < current:
        step = model.MIGRATIONS.get(version)
        if step is None:
            raise SchemaVersionError(
                f"{where}: schema version {found} is older than {model.__name__} version "
                f"{current} and cannot be migrated; rerun `{model.rerun(**names)}`",
                found=found,
                current=current,
            )
        data = step(data)
        version += 1
    return data


def parse(data: Any, model: type[M], where: str, **names: Any) -> M:
    """Parsed JSON -> ``model`` (migrated where older); StageOutputError naming ``where``."""
    if not isinstance(data, dict):
        raise StageOutputError(
            f"{where}: expected a JSON object, found {type(data).__name__}; "
            f"rerun `{model.rerun(**names)}`"
        )
    try:
        data = migrate(data, model, where, **names)
    except ValueError as exc:
        raise StageOutputError(f"{where}: {exc}; rerun `{model.rerun(**names)}`") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise StageOutputError(
            f"{where}: not a valid {model.__name__} ({first_error(exc)}); "
            f"rerun `{model.rerun(**names)}`"
        ) from None


def read(path: str | Path, model: type[M], **names: Any) -> M:
    """Read one stage output file into ``model`` (see the module docstring)."""
    path = Path(path)
    where = path.as_posix()
    if not path.is_file():
        raise MissingOutputError(f"{where}: missing; run `{model.rerun(**names)}`")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StageOutputError(
            f"{where}: unreadable ({exc}); rerun `{model.rerun(**names)}`"
        ) from None
    return parse(data, model, where, **names)


def parse_text(text: str, model: type[M], where: str, **names: Any) -> M:
    """A stage output's text (a file's, one line of a JSON Lines file's, or what DVC returned
    for an experiment's file) into ``model``; ``where`` names it in errors."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StageOutputError(
            f"{where}: not valid JSON ({exc.msg}); rerun `{model.rerun(**names)}`"
        ) from None
    return parse(data, model, where, **names)


def parse_entries(
    text: str, model_of: Callable[[Any], type[M]], where: str, **names: Any
) -> tuple[dict[str, M], list[str]]:
    """A stage output that maps names to entries each versioned on its own (best_config.json):
    (the entries that parse, each through ``model_of(entry)``; one problem per entry that does
    not, naming it). A file that is not such a mapping is a StageOutputError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StageOutputError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise StageOutputError(f"{where}: expected an object of named entries")
    entries: dict[str, M] = {}
    problems: list[str] = []
    for key, entry in data.items():
        try:
            entries[key] = parse(entry, model_of(entry), f"{where} [{key}]", **names)
        except StageOutputError as exc:
            problems.append(str(exc))
    return entries, problems


def first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``at <location>: <message>``."""
    first = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in first["loc"])
    extra = f" ({exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"at {loc or '(top)'}: {first['msg']}{extra}"


__all__ = [
    "MissingOutputError",
    "SchemaVersionError",
    "StageOutputError",
    "first_error",
    "migrate",
    "parse",
    "parse_entries",
    "parse_text",
    "read",
    "version_of",
    "write",
]
