"""``records.jsonl`` (stage ``bench@<pair>``; ``quantbench load`` writes the same): one line per
request of a load point, as the load generator saw it (:class:`RecordLine`).

Written as each request ends, by the load process (:mod:`quantbench.load.records`: the
``RequestRecord`` dataclass, whose fields these are, one for one, plus the line's version; a test
holds the two equal). Times are seconds on the machine's monotonic clock. Read by the session's
summary (:mod:`quantbench.load.metrics`), the report (its figures recomputed from the records)
and the exporters of :mod:`quantbench.exchange`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, version

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
    """What happened to one request (one line of ``records.jsonl``)."""

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
    scheduled_time: float | None = Field(None, description="open loop: when the arrival was due")
    requested_tokens: int | None = Field(None, description="the output length asked for")
    conversation: str | None = None
    turn: int = 0
    first_token_time: float | None = Field(None, description="the first chunk with content")
    end_time: float | None = None
    chunk_times: list[float] = Field(default_factory=list)
    chunk_tokens: list[int] = Field(default_factory=list)
    prompt_tokens: int | None = None
    cached_tokens: int | None = Field(None, description="prompt tokens its prefix cache served")
    draft_tokens: int | None = None
    draft_accepted: int | None = None
    output_tokens: int | None = None
    tokens_source: TokenSource = "none"
    status: Status = "completed"
    http_status: int | None = None
    error: str | None = None
    finish_reason: str | None = None
    output_text: str | None = None


__all__ = ["Phase", "RecordLine", "Status", "TokenSource"]
