"""The plan one load process (or a distributed master) executes: conversations, phases, limits.

The parent process turns a workload point into a plan (prompts rendered into conversations, the
request fields each engine accepts, seeds), so the load process needs no tokenizer. A plan is
plain JSON; a distributed master sends each worker its :meth:`LoadPlan.share`.

Every request belongs to a conversation of one or more turns (a single prompt is a conversation
of one turn). A stream (closed loop) or an arrival (open loop) runs a whole conversation: each
turn after the first waits its think time after the previous answer, then resends the history
(every earlier user turn and the answer the server streamed for it) with its own message.

Phases, per conversation in send order: the first ``warmup_conversations`` are warm-up; then
conversations are measured until the plan has measured enough (a count, a duration, or a
precision target met); after that, cool-down conversations keep the load what it was until every
measured request has finished, and are then stopped. Only measured requests enter the latency
figures; the tokens of every phase count towards the throughput of the measured window.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from quantbench.sequential import look_schedule, nominal_level
from quantbench.slo import Slo
from quantbench.workloads.arrivals import arrival_stream


@dataclass(frozen=True)
class Turn:
    """One user message of a conversation and the answer length it asks for."""

    content: str
    max_tokens: int
    think_s: float = 0.0
    """Seconds the user waits after the previous answer before sending this turn."""


@dataclass(frozen=True)
class Conversation:
    """One or more turns sent in order on one stream; the first turn's id names it."""

    prompt_id: str
    scenario: str
    turns: list[Turn]
    system: str | None = None
    """A system message sent before the first turn (shared system prompts go here)."""
    raw_prompt: str | None = None
    """Completions API: the prompt text, as it is (a single turn)."""


@dataclass(frozen=True)
class BodyRules:
    """How a turn becomes a request body for this server (see quantbench.load.requests)."""

    model: str
    profile: str
    stream_usage: dict[str, Any]
    fixed_length: tuple[str, ...]
    fixed_output_length: bool
    request_fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RaceFloor:
    """The race within a pair's grid (bench.race), handed to the load process: once this point's
    interval on ``metric`` lies wholly below ``floor`` (the low end of the leader's interval less
    the decision's equivalence margin and drift: quantbench.decision.margins), the decision
    could not rank it first and it stops measuring (quantbench.load.race)."""

    metric: str
    """``good_output_throughput`` (ranked by goodput under ``slo``) or ``output_throughput``."""
    floor: float
    leader: str
    """The leading row, '<server point> @ <load point>'."""
    slo: Slo
    """The per-request SLO that makes a request good (goodput)."""
    after: int
    """The interval's first look: the workload's ``precision.min_requests`` measured requests."""
    confidence: float
    """The interval's two-sided level at each of its looks (from ``after`` to the cap): its high
    end is one-sided at the nominal level of a constant group-sequential boundary over those
    looks (quantbench.sequential)."""
    first_look: int | None = None
    """A closed loop's first look, before ``after``: its streams' ceiling, which the lengths of
    its first requests cannot inflate (quantbench.load.race.ceiling); None: from ``after``."""
    ceiling_confidence: float | None = None
    """The ceiling's one-sided level at each of its looks (``first_look`` to before ``after``);
    None: the interval's high end's level."""

    @property
    def one_sided(self) -> float:
        """The level of the one-sided bound the ceiling's looks read."""
        if self.ceiling_confidence is not None:
            return self.ceiling_confidence
        return 1 - (1 - self.confidence) / 2


@dataclass(frozen=True)
class Precision:
    """Measure until every target percentile is known to within its relative half-width (an
    order-statistic interval at ``confidence``), at least ``min_measured`` requests."""

    targets: list[tuple[str, float, float]]
    """(metric, percentile, relative half-width): metric one of ttft, tpot, itl, e2e."""
    rel_half_width: float
    confidence: float
    min_measured: int
    check_every: int = 4
    max_measured: int | None = None
    """Stop measuring once this many measured requests completed (turns of multi-turn
    conversations count one each)."""
    fail_limits: list[tuple[str, float, float]] = field(default_factory=list)
    """(metric, percentile, upper limit in seconds) of the SLO's per-request latency limits: once
    ``min_measured`` requests are in and one percentile's interval lies wholly above its limit,
    the point fails its SLO beyond noise and measuring more could not change that."""
    first_look: int | None = None
    """The early-pass design's first look (quantbench.slo.EarlyPass): at this many measured
    requests the point stops if its SLO is shown met at ``verdict_confidence`` (its precision
    targets aside); None: one look, at the cap."""
    verdict_confidence: float | None = None
    """The one-sided confidence the point's SLO verdict is judged at (None: the bench's)."""
    pass_limits: list[tuple[str, float, float]] = field(default_factory=list)
    """(metric, percentile, upper limit in seconds) the first look must show met."""
    error_limit: float | None = None
    """The error-rate limit the first look must show met."""
    race: RaceFloor | None = None
    """Stop once the point cannot reach the pair's leader (None: no race)."""

    fail_confidence: float | None = None
    """The one-sided level each look that may show a fail is tested at (None:
    :meth:`fail_level` of ``confidence`` and the cap, computed where the plan is read)."""

    @classmethod
    def fail_level(cls, confidence: float, cap: int) -> float:
        """The one-sided level each of a point's fail looks (every ``check_every`` measured
        requests up to its ``cap``) is tested at, so that all of them together show a fail
        wrongly at most ``1 - confidence`` of the time: the nominal level of the constant
        group-sequential boundary over them (quantbench.sequential; with 22 looks up to 88
        requests at 95 %, 0.80 % a look where Bonferroni's equal share is 0.23 %)."""
        looks = look_schedule(cls.check_every, cap, cls.check_every)
        return 1 - nominal_level(looks, 1 - confidence)

    def fail_look_level(self) -> tuple[float, int]:
        """This point's fail looks' one-sided level and how many looks it is spread over."""
        cap = self.max_measured or 1000
        looks = len(look_schedule(self.check_every, cap, self.check_every))
        if self.fail_confidence is not None:
            return self.fail_confidence, looks
        return self.fail_level(self.confidence, cap), looks


@dataclass(frozen=True)
class Ticket:
    """One conversation to send: which, when (open loop: its arrival), and in which phase."""

    index: int
    conversation: Conversation
    at: float | None
    phase: Literal["warmup", "measured", "cooldown"]


@dataclass(frozen=True)
class LoadPlan:
    url: str
    path: str
    api: Literal["chat", "completions"]
    point: str
    mode: Literal["closed", "open"]
    users: int
    """Locust users: the streams of a closed loop, the in-flight cap of an open loop."""
    conversations: list[Conversation]
    """Cycled through in this order (the parent shuffled them for this point and repeat)."""
    rules: BodyRules
    warmup_conversations: int = 0
    warmup_s: float = 0.0
    measured_conversations: int | None = None
    """How many conversations to measure (the most, when ``precision`` may stop earlier)."""
    duration_s: float | None = None
    """Measure conversations that start within this many seconds after the warm-up."""
    precision: Precision | None = None
    rate: float | None = None
    """Open loop: conversations per second (gamma gaps with shape ``burstiness``)."""
    burstiness: float = 1.0
    ramp_s: float = 0.0
    """Open loop: the rate rises linearly from 0 over this many seconds first (a ramp)."""
    schedule: list[float] | None = None
    """Open loop replaying a trace: the arrival offsets, one per conversation, in order."""
    arrival_seed: int = 0
    timeout_s: float = 300.0
    """A request that receives no bytes for this long fails (idle timeout)."""
    request_timeout_s: float = 600.0
    """A request still streaming this long after it was sent fails (total deadline)."""
    point_timeout_s: float = 3600.0
    """The whole point stops this long after its start; what is left is recorded as such."""
    headers: dict[str, str] = field(default_factory=dict)
    progress_interval_s: float = 2.0
    id_prefix: str = ""
    unique_prompts: bool = True
    """Write each conversation's own marker over the room its first message holds for it
    (:mod:`quantbench.workloads.marker`; in front, on top of its length, where it holds none),
    so no conversation sent again finds its prompt in a prefix cache."""
    share_index: int = 0
    share_count: int = 1

    @property
    def adaptive(self) -> bool:
        return self.precision is not None

    def share(self, index: int, count: int) -> LoadPlan:
        """The part of this plan worker ``index`` of ``count`` sends: every count-th conversation
        (distributed runs measure a fixed count: a precision target needs one process to see all
        measured requests)."""
        return replace(self, share_index=index, share_count=count, precision=None)

    def conversation(self, index: int) -> Conversation:
        return self.conversations[index % len(self.conversations)]

    def arrival_offsets(self) -> Any:
        """Open loop: the arrival offsets (seconds from the start): a trace's, or endless."""
        if self.schedule is not None:
            return iter(self.schedule)

        assert self.rate is not None
        return arrival_stream(self.rate, self.burstiness, self.arrival_seed, ramp_s=self.ramp_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadPlan:
        data = dict(data)
        data["conversations"] = [
            Conversation(
                prompt_id=c["prompt_id"],
                scenario=c["scenario"],
                turns=[Turn(**t) for t in c["turns"]],
                system=c.get("system"),
                raw_prompt=c.get("raw_prompt"),
            )
            for c in data["conversations"]
        ]
        rules = dict(data["rules"])
        rules["fixed_length"] = tuple(rules["fixed_length"])
        data["rules"] = BodyRules(**rules)
        if data.get("precision") is not None:
            p = dict(data["precision"])
            p["targets"] = [tuple(t) for t in p["targets"]]  # JSON made the tuples lists
            p["fail_limits"] = [tuple(t) for t in p.get("fail_limits", [])]
            p["pass_limits"] = [tuple(t) for t in p.get("pass_limits", [])]
            if p.get("race") is not None:
                race = p["race"]
                p["race"] = RaceFloor(**{**race, "slo": Slo(race["slo"])})
            data["precision"] = Precision(**p)
        return cls(**data)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict()), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> LoadPlan:
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
