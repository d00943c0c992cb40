"""The one per-request record, and its JSON Lines file format.

Times are seconds on the monotonic clock (``time.monotonic()``, Linux's CLOCK_MONOTONIC): it never
jumps when the wall clock is set (NTP, a person, a VM resuming), and every process of one machine
reads the same one, so the load processes' times, the parent's and the mock server's truth log
compare directly. Its zero is arbitrary: a run's wall-clock start is recorded once beside its
records, for people. Several machines (distributed load) each measure on their own clock and only
differences of one machine's times are used.

Each request has a phase: ``warmup`` (sent first, never measured), ``measured``, or ``cooldown``
(sent after the measured ones to keep the load steady until every measured request has finished;
never measured either, but the tokens they stream inside the measured window count towards its
throughput, like every request's).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from quantbench.schemas import io as schema_io
from quantbench.schemas.base import VERSION_KEY
from quantbench.schemas.records import Phase, RecordLine, Status, TokenSource

# Status: completed: streamed to its end; failed: an error (the reason in `error`); incomplete:
# still streaming when the point stopped; unsent: arrived (open loop) but never sent before the
# stop. Each line of the file is a RecordLine (schemas.records): these fields and its version.
LINE_VERSION = RecordLine.current_version()


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request, as seen by the load generator."""

    request_id: str
    index: int
    """Position in the point's request sequence (0 is the first request sent)."""
    point: str
    scenario: str
    prompt_id: str
    phase: Phase
    worker: int
    send_time: float
    scheduled_time: float | None = None
    """Open loop: when the arrival was due; send_time - scheduled_time is the arrival lag."""
    requested_tokens: int | None = None
    """The output length asked for (max_tokens), to hold the delivered length against."""
    conversation: str | None = None
    """The conversation this request is a turn of (its id)."""
    turn: int = 0
    """Which turn of its conversation (0: the first)."""
    first_token_time: float | None = None
    """Arrival of the first chunk with non-empty content (role-only chunks do not count)."""
    end_time: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    """Arrival time of every chunk that carried content."""
    chunk_tokens: list[int] = field(default_factory=list)
    """Tokens in each content chunk: from cumulative usage when the server streams it, else 1."""
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens the server says came from its prefix cache (usage.prompt_tokens_details,
    or llama-server's timings.cache_n); None where it does not say."""
    draft_tokens: int | None = None
    draft_accepted: int | None = None
    """Speculative decoding: tokens the draft proposed and the target accepted for this request
    (llama-server's timings.draft_n / draft_n_accepted); None where the server does not say."""
    output_tokens: int | None = None
    tokens_source: TokenSource = "none"
    status: Status = "completed"
    http_status: int | None = None
    error: str | None = None
    finish_reason: str | None = None
    output_text: str | None = None

    @property
    def warmup(self) -> bool:
        return self.phase == "warmup"

    @property
    def measured(self) -> bool:
        return self.phase == "measured"

    @property
    def served(self) -> bool:
        """Whether the server answered it to the end (neither failed nor cut nor unsent)."""
        return self.status == "completed"

    # Derived values, in seconds; None where undefined.
    @property
    def ttft(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.send_time

    @property
    def e2e(self) -> float | None:
        if self.end_time is None:
            return None
        return self.end_time - self.send_time

    @property
    def tpot(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1); undefined below 2 output tokens."""
        ttft, e2e, n = self.ttft, self.e2e, self.output_tokens
        if ttft is None or e2e is None or n is None or n < 2:
            return None
        return (e2e - ttft) / (n - 1)

    @property
    def itls(self) -> list[float]:
        """Gaps between consecutive content chunks."""
        t = self.chunk_times
        return [b - a for a, b in itertools.pairwise(t)]

    def as_dict(self) -> dict[str, Any]:
        """The record's fields, shallow: every value is JSON's already (lists of numbers at
        most), and the load process writes a record as a request ends, in its event loop, where
        ``dataclasses.asdict``'s deep copy cost 230 us a record: 64 streams ending together
        held every other stream's chunks back 15 ms (tests/load/test_accuracy.py)."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}

    def to_json(self) -> str:
        """The record as one line of ``records.jsonl`` (a :class:`RecordLine`, versioned)."""
        return json.dumps({VERSION_KEY: LINE_VERSION, **self.as_dict()}, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "record") -> RequestRecord:
        """A record a load worker sent its master (``as_dict``, current fields only); files are
        read through their schema (:func:`iter_records`)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{where}: unknown record fields {unknown}")
        try:
            return cls(**data)
        except TypeError as e:
            raise ValueError(f"{where}: {e}") from None


_FIELD_NAMES = tuple(f.name for f in fields(RequestRecord))


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
                parsed = schema_io.parse_text(line, RecordLine, f"{path}:{lineno}")
                yield RequestRecord(**{name: getattr(parsed, name) for name in _FIELD_NAMES})


def read_records(path: Path) -> list[RequestRecord]:
    return list(iter_records(path))
