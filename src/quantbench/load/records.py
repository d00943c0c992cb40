"""The per-request record the load generator fills in, its JSON Lines file, and its tally.

The record is the schema's :class:`~quantbench.schemas.records.RecordLine` (one line of
``records.jsonl``: its fields, clock, phases and statuses are described there); ``RequestRecord``
is the load generator's name for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from quantbench.schemas import io as schema_io
from quantbench.schemas.records import RecordLine

RequestRecord = RecordLine
"""What happened to one request, as seen by the load generator (one line of its file)."""


@dataclass
class Tally:
    """Records counted by status as they come in (the load process's progress and stop checks):
    ``incomplete`` counts the unsent with the incomplete, neither answered nor failed."""

    completed: int = 0
    failed: int = 0
    incomplete: int = 0
    chunks: int = 0
    """Content chunks the records received."""

    def add(self, rec: RequestRecord) -> None:
        if rec.status == "completed":
            self.completed += 1
        elif rec.status == "failed":
            self.failed += 1
        else:
            self.incomplete += 1
        self.chunks += len(rec.chunk_times)

    @property
    def records(self) -> int:
        return self.completed + self.failed + self.incomplete


def write_records(path: Path, records: Iterable[RequestRecord]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(rec.to_json() + "\n")
            n += 1
    return n


def iter_records(path: Path) -> Iterator[RequestRecord]:
    """The records of ``path``, each line read as a :class:`RecordLine` (older lines migrated;
    an unreadable one is a StageOutputError naming the file, the line and the stage)."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield schema_io.parse_text(line, RecordLine, f"{path}:{lineno}")


def read_records(path: Path) -> list[RequestRecord]:
    return list(iter_records(path))


__all__ = ["RequestRecord", "Tally", "iter_records", "read_records", "write_records"]
