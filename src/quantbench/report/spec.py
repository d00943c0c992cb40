"""params.yaml `report:`: how the decision is made (the equivalence margin, drift, the quality
gate, the tie-breaks' materiality, the confirming measurements), extra SLO profiles and the
Pareto axes (docs/BENCH.md, "How the decision is made")."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from quantbench.decision.gate import check_limits
from quantbench.decision.margins import DecisionMargins
from quantbench.decision.rules import DecisionSettings
from quantbench.schemas import metrics as registry
from quantbench.settings import Settings
from quantbench.slo import DEFAULT_PROFILE, Slo

PROFILE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")

# The Pareto charts' axes a run may choose (quantbench.schemas.metrics: each metric's ``axis``):
# a Literal of the registry's names for validation and the params' schema, a str to the checker
if TYPE_CHECKING:
    LatencyColumn = str
    QualityColumn = str
else:
    LatencyColumn = Literal[registry.LATENCY_AXES]
    QualityColumn = Literal[registry.QUALITY_AXES]


class ConfirmSettings(Settings):
    """The ``decide`` stage: what it measures again, in alternation, and for how long."""

    enabled: bool = Field(True, description="false: no confirming measurement (screening only).")
    budget_s: float = Field(
        150,
        ge=0,
        description="Wall seconds of confirming measurement at most (server starts included); "
        "no round starts that would not fit, and what is still not separable then is reported "
        "as such.",
    )
    round_s: float = Field(
        12,
        gt=0,
        description="Measured seconds of each side of a round: a round compares the ranked "
        "figure (throughput over the window, its interval from ten time slices); the row's SLO "
        "verdict was decided at its full, power-sized point.",
    )
    min_rounds: int = Field(
        2,
        ge=1,
        le=20,
        description="Rounds before a comparison may conclude: 2 is one A B, B A block, which "
        "cancels a drift linear over it (one round takes that drift for a difference).",
    )
    max_rounds: int = Field(4, ge=1, le=20, description="Rounds (each side measured once) at most.")


class ReportSettings(DecisionMargins):
    """How the report stage judges and draws the measurements (nothing here is measured)."""

    profiles: dict[str, Slo] = Field(
        {},
        description="Extra named SLO profiles, name -> constraint text in the `slo:` syntax, e.g. "
        "{interactive: 'ttft:p95<=500ms; tpot:p50<=100ms', batch: 'output_tps>=50'}. Every "
        "measured point is re-judged against each from its raw request records; "
        "best_config.json gets one winner per profile. The profile named 'default' is `slo:`.",
    )
    latency_axis: LatencyColumn = Field(
        "e2e_p99_ms", description="Latency on the throughput-vs-latency Pareto chart."
    )
    quality_axis: QualityColumn = Field(
        "kl_mean",
        description="Quality measure on the quality Pareto charts (perplexity_ratio: variant / "
        "merged model; kl_mean, kl_high: KL divergence from the merged model; top1_agreement; "
        "heldout_accuracy: the fine-tune's task scored offline on the variant; task_accuracy: "
        "the same task scored through each pair's own server, per pair).",
    )
    quality: dict[str, float] = Field(
        {"kl_mean": 0.15, "top1_agreement": 0.80},
        description="Quality gate, against the merged model: a variant is ranked only when its "
        "quality interval lies within every limit. Keys: kl_mean (at most, nats), "
        "top1_agreement (at least), heldout_accuracy_loss (at most, a fraction: 0.05 is 5 "
        "points of the fine-tune's task: shown within only with enough questions, the shipped 253 "
        "give about ±3 points), perplexity_ratio (at most). The default gates on what tracks "
        "fidelity to the merged model; perplexity on the evaluation text is reported, "
        "not gated: it moves with how far a copy drifts back towards the base model "
        "(docs/QUANTIZE.md). {} ranks every variant.",
    )
    materiality: dict[str, float] = Field(
        {"quality": 0.01, "memory": 0.10, "latency": 0.10},
        description="Tie-breaks, in order quality, memory, latency: a difference decides only "
        "when it is beyond its noise and beyond this relative size (quality: e^KL, the mean KL "
        "divergence from the merged model as a ratio, 0.01 = 0.01 nats; memory: the server's peak; latency: E2E p50).",
    )
    stability_resamples: int = Field(
        1000,
        ge=100,
        le=100000,
        description="Resamples of every contender's measurements for the decision's stability "
        "(how often each configuration would win a second run).",
    )
    confirm: ConfirmSettings = Field(
        default_factory=lambda: ConfirmSettings(),
        description="The decide stage's confirming measurements (rows not yet separable from "
        "the leader, and tuned-against-default gains), measured in alternation.",
    )
    max_points_per_distribution: int = Field(
        2000,
        ge=50,
        le=100000,
        description="Latency distributions keep at most this many values per series (evenly "
        "spaced order statistics), so a long run does not bloat index.html.",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_gates(cls, data: Any) -> Any:
        if isinstance(data, dict):
            moved = {
                "max_perplexity_ratio": "report.quality: {perplexity_ratio: <limit>}",
                "min_heldout_accuracy": "report.quality: {heldout_accuracy_loss: <points lost, "
                "e.g. 0.05>} (the gate is now against the merged model's accuracy)",
            }
            for key, instead in moved.items():
                if key in data:
                    raise ValueError(
                        f"report.{key} is gone: the quality gate is now {instead}, judged on the "
                        "interval of each figure"
                    )
        return data

    @field_validator("quality")
    @classmethod
    def _quality_limits(cls, limits: dict[str, float]) -> dict[str, float]:
        return check_limits(limits)

    @field_validator("materiality")
    @classmethod
    def _materiality(cls, values: dict[str, float]) -> dict[str, float]:
        for name, value in values.items():
            if name not in ("quality", "memory", "latency"):
                raise ValueError(
                    f"report.materiality: unknown rule {name!r}; the tie-breaks are quality, "
                    "memory, latency"
                )
            if not 0 <= value < 1:
                raise ValueError(f"report.materiality.{name} {value}: give a share in [0, 1)")
        return {"quality": 0.01, "memory": 0.10, "latency": 0.10, **values}

    def decision(self, confidence: float) -> DecisionSettings:
        """The decision rule's settings from these and the bench stage's confidence."""
        return DecisionSettings(
            equivalence=self.equivalence,
            drift=self.drift,
            confidence=confidence,
            materiality=dict(self.materiality),
        )

    @field_validator("profiles", mode="before")
    @classmethod
    def _profiles_parse(cls, profiles: Any) -> Any:
        if not isinstance(profiles, dict):
            return profiles  # the field's own type check says what is wrong
        parsed: dict[str, Slo] = {}
        for name, text in profiles.items():
            if name == DEFAULT_PROFILE:
                raise ValueError(
                    f"profile {DEFAULT_PROFILE!r} is the top-level `slo:`; give this one another name"
                )
            if not PROFILE_NAME.match(name):
                raise ValueError(
                    f"profile name {name!r}: use a letter, then letters, digits, '_' or '-' (<= 40)"
                )
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"profile {name!r} has no constraints")
            try:
                parsed[name] = Slo(text)  # parsed once, here, with the caret under a bad part
            except ValueError as exc:
                raise ValueError(f"profile {name!r}: {exc}") from None
        return parsed
