"""``reports/report_metrics.json`` (stage ``report``): what ``dvc metrics show/diff`` and ``dvc exp
show`` compare across runs: the recommendation per workload (and per extra profile,
``<workload>:<profile>``), each pair's rank and brief figures per workload, and counts.

Written by :func:`quantbench.report.dvcfiles.metrics_json` through this model; read by ``quantbench
gather`` (each pair's good-token throughput per workload) and by DVC. Flat enough for DVC's
tables: every figure a number or null.

Before version 1 (no ``schema_version``) the recommendation's interval was keyed by the ranking
metric's own name (``good_output_throughput_low``); it is ``ranked_low``/``ranked_high`` beside
``ranked_by`` now, and the migration renames it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas import metrics
from quantbench.schemas.base import Migrations, StageOutput, Strict, version

_MEMORY = metrics.METRICS["peak_rss_mib"].description


class PairBrief(Strict):
    """One pair at its best point of one workload: few enough columns for ``dvc exp show``."""

    rank: int | None
    ranked: bool
    good_output_throughput: float | None
    output_throughput: float | None
    ttft_p90_ms: float | None
    tpot_p50_ms: float | None
    cost_per_million_tokens: float | None
    peak_rss_mib: float | None = Field(description=_MEMORY)
    perplexity_ratio: float | None
    heldout_accuracy: float | None


class Recommendation(Strict):
    """The recommended pair of one profile (``found`` false: none, and nothing else is set)."""

    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {
            "ties", "ranked_by", "ranked_low", "ranked_high", "rank", "ranked", "slo_verdict",
            "server_point", "load_point", *metrics.PAIR,
        }
    )  # fmt: skip

    pair: str | None
    found: bool
    ties: int | None = None
    ranked_by: str | None = None
    ranked_low: float | None = Field(None, description="the ranking figure's interval")
    ranked_high: float | None = None
    rank: int | None = None
    ranked: bool | None = None
    slo_verdict: Literal["pass", "fail", "undecided"] | None = None
    server_point: str | None = None
    load_point: str | None = None
    good_output_throughput: float | None = None
    output_throughput: float | None = None
    goodput: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p90_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    cost_per_million_tokens: float | None = None
    peak_rss_mib: float | None = Field(None, description=_MEMORY)
    size_mib: float | None = None
    perplexity: float | None = None
    perplexity_ratio: float | None = None
    kl_mean: float | None = None
    kl_high: float | None = None
    top1_agreement: float | None = None
    heldout_accuracy: float | None = None


class Counts(Strict):
    pairs: int
    workloads: int
    rows: int
    rows_measured: int
    rows_ranked: int
    rows_flagged: int
    points: int


def _ranked_interval(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 -> 1: ``<metric>_low``/``_high`` -> ``ranked_by``, ``ranked_low``/``_high``."""
    out = dict(data)
    out["schema_version"] = 1
    recommended = {}
    for key, rec in (out.get("recommended") or {}).items():
        rec = dict(rec)
        lows = [k for k in rec if k.endswith("_low") and k != "ranked_low"]
        if lows:
            metric = lows[0].removesuffix("_low")
            rec["ranked_by"] = metric
            rec["ranked_low"] = rec.pop(f"{metric}_low")
            rec["ranked_high"] = rec.pop(f"{metric}_high", None)
        recommended[key] = rec
    out["recommended"] = recommended
    return out


class ReportMetrics(StageOutput):
    """The report's figures for DVC to compare across runs."""

    OUTPUT: ClassVar[str] = "reports/report_metrics.json"
    STAGE: ClassVar[str] = "report"
    MIGRATIONS: ClassVar[Migrations] = {0: _ranked_interval}

    schema_version: Literal[1] = version(1)
    recommended: dict[str, Recommendation]
    pairs: dict[str, dict[str, PairBrief]] = Field(description="pair -> workload -> its figures")
    counts: Counts


__all__ = ["Counts", "PairBrief", "Recommendation", "ReportMetrics"]
