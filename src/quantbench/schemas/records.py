"""``records.jsonl`` (stage ``bench@<pair>``; ``quantbench load`` writes the same): one line per
request of a load point, as the load generator saw it (:class:`RecordLine`, the one definition of
the per-request record: the load generator fills one in as the request streams, under the name
``quantbench.load.records.RequestRecord``).

Times are seconds on the monotonic clock (``time.monotonic()``, Linux's CLOCK_MONOTONIC): it never
jumps when the wall clock is set (NTP, a person, a VM resuming), and every process of one machine
reads the same one, so the load processes' times, the parent's and the mock server's truth log
compare directly. Its zero is arbitrary: a run's wall-clock start is recorded once beside its
records, for people. Several machines (distributed load) each measure on their own clock and only
differences of one machine's times are used.

Each request has a phase: ``warmup`` (sent first, never measured), ``measured``, or ``cooldown``
(sent after the measured ones to keep the load steady until every measured request has finished;
never measured either, but the tokens they stream inside the measured window count towards its
throughput, like every request's). Its status: ``completed`` (streamed to its end), ``failed``
(an error, the reason in ``error``), ``incomplete`` (still streaming when the point stopped) or
``unsent`` (arrived, open loop, but never sent before the stop).

Written as each request ends, by the load process (:mod:`quantbench.load.records`). Read by the
session's summary (:mod:`quantbench.load.metrics`), the report (its figures recomputed from the
records) and the exporters of :mod:`quantbench.exchange`.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from quantbench.schemas.base import VERSION_KEY, Migrations, StageOutput, version

Status = Literal["completed", "failed", "incomplete", "unsent"]
Phase = Literal["warmup", "measured", "cooldown"]
TokenSource = Literal["usage", "tokenizer", "chunks", "none"]


def _phase_from_warmup(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (no ``schema_version``); its first lines had a flag ``warmup`` where later ones
    have the request's ``phase``."""
    out = dict(data)
    if "warmup" in out and "phase" not in out:
        out["phase"] = "warmup" if out.pop("warmup") else "measured"
    out["schema_version"] = 1
    return out


class RecordLine(StageOutput):
    """What happened to one request (one line of ``records.jsonl``). The load generator fills
    it in as the request streams: its fields are assigned as chunks arrive, unvalidated."""

    OUTPUT: ClassVar[str] = (
        "reports/bench/{pair}/{server_point}/{workload}/{load_point}/r{repeat}/records.jsonl"
    )
    STAGE: ClassVar[str] = "bench@{pair}"
    MIGRATIONS: ClassVar[Migrations] = {0: _phase_from_warmup}

    schema_version: Literal[1] = version(1)
    request_id: str
    index: int = Field(description="position in the point's request sequence (0: sent first)")
    point: str
    scenario: str
    prompt_id: str
    phase: Phase
    worker: int
    send_time: float
    scheduled_time: float | None = Field(
        None,
        description="open loop: when the arrival was due (send_time - scheduled_time is the "
        "arrival lag)",
    )
    requested_tokens: int | None = Field(
        None, description="the output length asked for (max_tokens), to hold the answer's against"
    )
    conversation: str | None = Field(None, description="the conversation this is a turn of")
    turn: int = Field(0, description="which turn of its conversation (0: the first)")
    first_token_time: float | None = Field(
        None, description="the first chunk with content (role-only chunks do not count)"
    )
    end_time: float | None = None
    chunk_times: list[float] = Field(
        default_factory=list, description="the arrival of every chunk that carried content"
    )
    chunk_tokens: list[int] = Field(
        default_factory=list,
        description="tokens in each content chunk: from the cumulative usage where the server "
        "streams it, else 1",
    )
    prompt_tokens: int | None = None
    cached_tokens: int | None = Field(
        None,
        description="prompt tokens its prefix cache served (usage.prompt_tokens_details, or "
        "llama-server's timings.cache_n); None where the server does not say",
    )
    draft_tokens: int | None = Field(
        None, description="speculative decoding: tokens the draft proposed (timings.draft_n)"
    )
    draft_accepted: int | None = Field(
        None, description="speculative decoding: tokens the target accepted of them"
    )
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
        """The record's fields without the line's version, shallow: every value is JSON's
        already (lists of numbers at most), and the load process writes a record as a request
        ends, in its event loop, where a deep copy (``dataclasses.asdict``'s) cost 230 us a
        record: 64 streams ending together held every other stream's chunks back 15 ms
        (tests/load/test_accuracy.py)."""
        return {name: getattr(self, name) for name in RECORD_FIELDS}

    def to_json(self) -> str:
        """The record as one line of ``records.jsonl``: its version first, then its fields."""
        line = {VERSION_KEY: self.schema_version, **self.as_dict()}
        return json.dumps(line, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "record") -> RecordLine:
        """A record a load worker sent its master (``as_dict``: current fields, no version);
        files are read through :func:`quantbench.schemas.io.parse_text`, which migrates."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or 'record'}: {err['msg']}" for err in e.errors()
            )
            raise ValueError(f"{where}: {problems}") from None


RECORD_FIELDS: tuple[str, ...] = tuple(n for n in RecordLine.model_fields if n != VERSION_KEY)
"""The record's fields, in the order a line holds them (after its version)."""


__all__ = ["RECORD_FIELDS", "Phase", "RecordLine", "Status", "TokenSource"]
