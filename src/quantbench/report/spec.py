"""params.yaml `report:`: extra SLO profiles, the Pareto axes, and optional quality gates."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from quantbench.settings import Settings

DEFAULT_PROFILE = "default"
PROFILE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")

LatencyColumn = Literal[
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
]
QualityColumn = Literal[
    "perplexity_ratio", "kl_mean", "kl_high", "top1_agreement", "heldout_accuracy"
]


class ReportSettings(Settings):
    """How the report stage judges and draws the measurements (nothing here is measured)."""

    profiles: dict[str, str] = Field(
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
        "perplexity_ratio",
        description="Quality measure on the quality Pareto charts (perplexity_ratio: variant / "
        "merged model; kl_mean, kl_high: KL divergence from the merged model; top1_agreement; "
        "heldout_accuracy).",
    )
    max_perplexity_ratio: float | None = Field(
        None,
        gt=0,
        description="Quality gate: a variant whose perplexity exceeds the merged model's by more "
        "than this factor is never recommended (null: no gate).",
    )
    min_heldout_accuracy: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Quality gate: a variant answering fewer held-out questions than this share "
        "is never recommended (null: no gate).",
    )
    max_points_per_distribution: int = Field(
        2000,
        ge=50,
        le=100000,
        description="Latency distributions keep at most this many values per series (evenly "
        "spaced order statistics), so a long run does not bloat index.html.",
    )

    @field_validator("profiles")
    @classmethod
    def _profiles_parse(cls, profiles: dict[str, str]) -> dict[str, str]:
        from quantbench.slo import parse_slo

        for name, text in profiles.items():
            if name == DEFAULT_PROFILE:
                raise ValueError(
                    f"profile {DEFAULT_PROFILE!r} is the top-level `slo:`; give this one another name"
                )
            if not PROFILE_NAME.match(name):
                raise ValueError(
                    f"profile name {name!r}: use a letter, then letters, digits, '_' or '-' (<= 40)"
                )
            if not text.strip():
                raise ValueError(f"profile {name!r} has no constraints")
            try:
                parse_slo(text)
            except ValueError as exc:
                raise ValueError(f"profile {name!r}: {exc}") from None
        return profiles
