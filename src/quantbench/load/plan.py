"""The plan one load process (or a distributed master) executes: requests, times and limits.

The parent process turns a workload point into a plan (prompts rendered to request bodies, arrival
offsets computed from the seed), so the load process needs no tokenizer and no randomness. A plan
is plain JSON; a distributed master sends each worker its :meth:`LoadPlan.share`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class PlannedRequest:
    """One request body, sent as often as the plan cycles through it."""

    prompt_id: str
    scenario: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Ticket:
    """One request to send: which body, when (open loop), and whether it is warm-up."""

    index: int
    request: PlannedRequest
    at: float | None
    warmup: bool


@dataclass(frozen=True)
class LoadPlan:
    url: str
    path: str
    api: Literal["chat", "completions"]
    point: str
    mode: Literal["closed", "open"]
    users: int
    """Locust users: the streams of a closed loop, the in-flight cap of an open loop."""
    requests: list[PlannedRequest]
    total: int | None
    """Requests to send in all (warm-up included); None: until the time is up."""
    arrivals: list[float] | None = None
    """Open loop: arrival offsets in seconds from the start, one per request."""
    warmup_requests: int = 0
    warmup_s: float = 0.0
    duration_s: float | None = None
    """Measured seconds; the run stops warmup_s + duration_s after its start."""
    timeout_s: float = 300.0
    headers: dict[str, str] = field(default_factory=dict)
    progress_interval_s: float = 2.0
    id_prefix: str = ""
    share_index: int = 0
    share_count: int = 1

    @property
    def stop_after_s(self) -> float | None:
        return None if self.duration_s is None else self.warmup_s + self.duration_s

    def share(self, index: int, count: int) -> LoadPlan:
        """The part of this plan worker ``index`` of ``count`` sends: every count-th request."""
        return replace(self, share_index=index, share_count=count)

    def tickets(self) -> Iterator[Ticket]:
        """This share's requests in send order; endless when the plan has only a duration."""
        n_bodies = len(self.requests)
        limit = self.total
        if self.arrivals is not None:
            limit = len(self.arrivals) if limit is None else min(limit, len(self.arrivals))
        i = self.share_index
        while limit is None or i < limit:
            at = self.arrivals[i] if self.arrivals is not None else None
            yield Ticket(i, self.requests[i % n_bodies], at, i < self.warmup_requests)
            i += self.share_count

    def share_size(self) -> int | None:
        limit = self.total
        if self.arrivals is not None:
            limit = len(self.arrivals) if limit is None else min(limit, len(self.arrivals))
        if limit is None:
            return None
        return len(range(self.share_index, limit, self.share_count))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadPlan:
        data = dict(data)
        data["requests"] = [PlannedRequest(**r) for r in data["requests"]]
        return cls(**data)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict()), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> LoadPlan:
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
