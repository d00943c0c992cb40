"""``reports/workloads/<name>.json`` and ``<name>.jsonl`` (stage ``workloads``): a workload's
traffic, one conversation a line (:class:`TrafficLine`, each line versioned on its own), and what
it is made of (:class:`WorkloadSummary`).

Written by ``stages/workloads.py`` (:mod:`quantbench.workloads.traffic`); the summary comes from
:func:`quantbench.workloads.stats.summarize`:
its size, the spread of its prompt and answer lengths, turns and think times, and the share of
prompt tokens a prefix cache could serve. Read by the estimate (the lengths and think times it
predicts at), ``quantbench plan``, the bench (the share beside what the engine's cache served)
and the report; each load session keeps a copy in its own summary.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version

_SPREADS = ("turns", "input_tokens", "output_tokens", "think_s")


class Spread(Strict):
    """The spread of one quantity over the workload's requests (or conversations, for turns)."""

    count: int
    mean: float
    p50: float
    p90: float
    max: float


class TurnLine(Strict):
    """One user message of a conversation and the answer length it asks for."""

    content: str
    max_tokens: int
    think_s: float = Field(0.0, description="seconds the user waits before sending it")


class TrafficLine(StageOutput):
    """One line of ``<name>.jsonl``: one conversation, sent in order on one stream."""

    OUTPUT: ClassVar[str] = "reports/workloads/{name}.jsonl"
    STAGE: ClassVar[str] = "workloads"
    # version 0 (no schema_version) had the same fields
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1)}
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"arrival_s"})

    schema_version: Literal[1] = version(1)
    prompt_id: str
    scenario: str
    turns: list[TurnLine]
    system: str | None = Field(None, description="a system message before the first turn")
    raw_prompt: str | None = Field(None, description="the prompt as is (completions API)")
    arrival_s: float | None = Field(
        None, description="when a replayed trace sends it, from the start (a trace only)"
    )


def _empty_spreads_are_none(data: dict[str, Any]) -> None:
    """Before version 1 a quantity with no value (no later turn: no think time) was ``{}``."""
    for key in _SPREADS:
        if data.get(key) == {}:
            data[key] = None


class WorkloadSummary(StageOutput):
    """A workload's traffic summarized (tokens where the model's tokenizer counted them, else
    words: ``counted_with``)."""

    OUTPUT: ClassVar[str] = "reports/workloads/{name}.json"
    STAGE: ClassVar[str] = "workloads"
    # version 0 had a key of its own, "version": 1, and wrote an empty spread as {}
    MIGRATIONS: ClassVar[Migrations] = {
        0: stamp(1, drop=("version",), nested=_empty_spreads_are_none)
    }

    schema_version: Literal[1] = version(1)
    name: str | None = Field(None, description="the workload's name in params (`workloads:`)")
    source: str | None = Field(
        None, description="where its conversations came from (generator, file or trace)"
    )
    conversations: int
    requests: int = Field(description="every turn of every conversation: one request each")
    turns: Spread | None = Field(description="turns per conversation")
    input_tokens: Spread | None = Field(description="prompt length per request, history resent")
    output_tokens: Spread | None = Field(description="answer length asked per request")
    think_s: Spread | None = Field(
        description="seconds a user waits before a later turn (None: single-turn)"
    )
    prefix_reuse_share: float = Field(
        ge=0.0, le=1.0, description="prompt tokens an earlier prompt (and its answer) shared"
    )
    counted_with: Literal["tokenizer", "words"]
    context: int | None = Field(None, description="the tokens one request may hold, if fitted")
    context_from: str | None = Field(
        None, description="what set that context (an engine setting, or the model's context)"
    )
    longest_request: int | None = Field(None, description="prompt plus answer, if fitted")
    turns_dropped_to_fit: int = Field(0, description="turns left out: they would not fit")

    def mean(self, spread: str, default: float) -> float:
        """The mean of one of the spreads, ``default`` where it has none."""
        found: Spread | None = getattr(self, spread)
        return found.mean if found is not None else default


__all__ = ["Spread", "TrafficLine", "TurnLine", "WorkloadSummary"]
