"""The report's tables: one line per pair and profile, quality deltas, formatting of numbers.

Everything here is computed from the loaded stage outputs and the judged profiles; the HTML,
Markdown and JSON writers only lay it out.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

from quantbench.report.inputs import HEADLINE_METRICS, ReportInputs
from quantbench.report.profiles import JudgedRow, Profile, Verdict
from quantbench.schemas.bench import BenchRow, PairSummary, ServerPoint
from quantbench.schemas.quality import QualityReport
from quantbench.schemas.variant import VariantRecord

Better = Literal["max", "min"]
MIB = 2**20


@dataclass(frozen=True)
class MetricDef:
    label: str
    unit: str
    better: Better
    digits: int = 3

    def title(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


METRICS: dict[str, MetricDef] = {
    "output_throughput": MetricDef("Output throughput", "tok/s", "max"),
    "request_throughput": MetricDef("Request throughput", "req/s", "max"),
    "goodput": MetricDef("Goodput", "req/s", "max"),
    "error_rate": MetricDef("Error rate", "", "min"),
    "ttft_p50_ms": MetricDef("TTFT p50", "ms", "min"),
    "ttft_p99_ms": MetricDef("TTFT p99", "ms", "min"),
    "tpot_p50_ms": MetricDef("TPOT p50", "ms", "min"),
    "tpot_p99_ms": MetricDef("TPOT p99", "ms", "min"),
    "itl_p50_ms": MetricDef("ITL p50", "ms", "min"),
    "itl_p99_ms": MetricDef("ITL p99", "ms", "min"),
    "e2e_p50_ms": MetricDef("E2E p50", "ms", "min"),
    "e2e_p99_ms": MetricDef("E2E p99", "ms", "min"),
    "cost_per_million_tokens": MetricDef("Cost per 1M output tokens", "", "min"),
    "load": MetricDef("Load (concurrency or req/s)", "", "max"),
    "peak_rss_mib": MetricDef("Peak server memory", "MiB", "min"),
    "size_mib": MetricDef("Size on disk", "MiB", "min"),
    "perplexity": MetricDef("Perplexity", "", "min"),
    "perplexity_ratio": MetricDef("Perplexity / merged model", "x", "min", 4),
    "kl_mean": MetricDef("KL divergence, mean", "nats", "min"),
    "kl_high": MetricDef("KL divergence, high percentile", "nats", "min"),
    "top1_agreement": MetricDef("Top-1 agreement with merged", "", "max"),
    "heldout_accuracy": MetricDef("Held-out accuracy", "", "max"),
}


# ---------------------------------------------------------------------------------------------
# number formatting (shared by HTML and Markdown)


def num(value: float | None, digits: int = 3) -> str:
    """A number with `digits` significant digits (at least the integer part); '–' for none."""
    if value is None or not math.isfinite(value):
        return "–"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:,.{decimals}f}"


def ms(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    if abs(value) >= 10000:
        return f"{value / 1000:,.1f} s"
    return f"{num(value)} ms"


def pct(value: float | None, digits: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value * 100:.{digits}f} %"


def signed_pct(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value * 100:+.1f} %"


def mib(value: int | float | None) -> str:
    if value is None:
        return "–"
    if value >= 10 * 2**30:
        return f"{value / 2**30:,.1f} GiB"
    return f"{value / MIB:,.0f} MiB"


def money(value: float | None, currency: str) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{num(value)} {currency}"


def command_line(argv: list[str]) -> str:
    return shlex.join(argv)


# ---------------------------------------------------------------------------------------------
# quality relative to the merged (bf16) model


@dataclass
class QualityReference:
    """What a variant's quality is compared with: the merged model and its held-out score."""

    perplexity: float | None
    heldout_accuracy: float | None
    heldout_correct: int | None
    heldout_total: int | None
    heldout_source: str
    size_bytes: int | None


def quality_reference(inputs: ReportInputs) -> QualityReference:
    ppl = next(
        (q.reference_perplexity for q in inputs.quality.values() if q.reference_perplexity),
        None,
    )
    bf16 = next((q for q in inputs.quality.values() if q.format == "bf16"), None)
    size = inputs.merged_info.size_bytes if inputs.merged_info else None
    if bf16 is not None and bf16.heldout_accuracy is not None:
        return QualityReference(
            ppl,
            bf16.heldout_accuracy,
            bf16.heldout.correct,
            bf16.heldout.total,
            f"variant {bf16.name} (the merged weights, run by the same harness)",
            size or bf16.size_bytes,
        )
    ft = inputs.finetune
    if ft is not None and ft.accuracy_after is not None:
        return QualityReference(
            ppl,
            ft.accuracy_after,
            None,
            None,
            "finetune stage (adapter model after training)",
            size,
        )
    return QualityReference(ppl, None, None, None, "none measured", size)


@dataclass
class QualityDelta:
    """What one variant gives up against the merged model."""

    variant: str
    report: QualityReport | None
    reference: QualityReference

    @property
    def perplexity_delta(self) -> float | None:
        """Relative perplexity change vs the merged model (+0.05 = 5 % worse)."""
        r = self.report
        return (r.perplexity_ratio - 1.0) if r and r.perplexity_ratio is not None else None

    @property
    def heldout_delta(self) -> float | None:
        r, ref = self.report, self.reference.heldout_accuracy
        if r is None or r.heldout_accuracy is None or ref is None:
            return None
        return r.heldout_accuracy - ref

    def heldout_text(self) -> str:
        r = self.report
        if r is None or r.heldout_accuracy is None:
            return "–"
        own = (
            f"{r.heldout.correct}/{r.heldout.total}"
            if r.heldout.total
            else pct(r.heldout_accuracy, 0)
        )
        ref = self.reference
        if ref.heldout_accuracy is None:
            return own
        theirs = (
            f"{ref.heldout_correct}/{ref.heldout_total}"
            if ref.heldout_total
            else pct(ref.heldout_accuracy, 0)
        )
        return f"{own} (merged {theirs})"

    def parts(self) -> list[str]:
        """Perplexity change, KL divergence and held-out score, one short phrase each."""
        r = self.report
        if r is None:
            return ["not evaluated"]
        parts = []
        if r.perplexity is not None:
            parts.append(f"ppl {num(r.perplexity, 4)} ({signed_pct(self.perplexity_delta)})")
        if r.kl_divergence.mean is not None:
            parts.append(f"KL {num(r.kl_divergence.mean)}")
        if r.heldout_accuracy is not None:
            parts.append(f"held-out {self.heldout_text()}")
        return parts or ["no figures"]

    def short(self) -> str:
        """One cell: perplexity change and held-out score."""
        return ", ".join(self.parts())

    def given_up(self) -> str:
        """A sentence for the recommendation: what quality this variant costs."""
        r, ref = self.report, self.reference
        if r is None:
            return f"quality of {self.variant} was not evaluated (no reports/quality/{self.variant}.json)"
        parts = []
        if r.perplexity is not None and ref.perplexity is not None:
            parts.append(
                f"perplexity {num(r.perplexity, 4)} vs {num(ref.perplexity, 4)} for the merged "
                f"bf16 model ({signed_pct(self.perplexity_delta)})"
            )
        if r.kl_divergence.mean is not None:
            high = r.kl_divergence.high
            tail = f", {high[0]} {num(high[1])}" if high else ""
            parts.append(f"KL divergence from it {num(r.kl_divergence.mean)} nats mean{tail}")
        if r.top1_agreement is not None:
            parts.append(f"same top-1 token {pct(r.top1_agreement)} of the time")
        if r.heldout_accuracy is not None:
            parts.append(f"held-out answers {self.heldout_text()}")
        return "; ".join(parts) if parts else "no quality figures"


def quality_value(report: QualityReport | None, key: str) -> float | None:
    """A quality figure by the names of :data:`METRICS`."""
    if report is None:
        return None
    if key == "kl_mean":
        return report.kl_divergence.mean
    if key == "kl_high":
        high = report.kl_divergence.high
        return high[1] if high else None
    if key == "size_mib":
        return report.size_bytes / MIB if report.size_bytes else None
    value = getattr(report, key, None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# ---------------------------------------------------------------------------------------------
# one line per pair and profile


@dataclass
class PairLine:
    """A pair (variant x engine) under one profile: its winner, or its nearest miss."""

    pair: str
    variant: str
    engine: str
    format: str
    engine_version: str
    judged: JudgedRow | None
    passes: bool
    quality: QualityDelta
    size_bytes: int | None
    server: ServerPoint | None
    currency: str
    failure: str | None = None
    """Why the pair has no measurement at all (its server never came up), if so."""

    @property
    def row(self) -> BenchRow | None:
        return self.judged.row if self.judged else None

    @property
    def peak_rss_bytes(self) -> int | None:
        return self.server.report.peak_rss_bytes if self.server else None

    @property
    def peak_gpu_bytes(self) -> int | None:
        return self.server.report.peak_gpu_bytes if self.server else None

    @property
    def verdicts(self) -> list[Verdict]:
        return self.judged.verdicts if self.judged else []

    @property
    def reasons(self) -> list[str]:
        """Failed constraints (or the error) for a miss; all constraints for a pass."""
        if self.failure:
            return [self.failure]
        if self.judged is None:
            return ["no rows"]
        if self.verdicts:
            picked = (
                [v for v in self.verdicts if not v.passed] if not self.passes else self.verdicts
            )
            return [v.reason for v in picked]
        return list(self.judged.row.slo_reasons)

    @property
    def status(self) -> str:
        if self.failure or self.judged is None or not self.judged.row.measured:
            return "error"
        if self.judged.row.slo_passed is None:
            return "no SLO"
        return "pass" if self.passes else "fail"


def _server_failure(summary: PairSummary) -> str | None:
    """The error that left the pair without a single measured point, if that happened."""
    if any(r.measured for r in summary.rows):
        return None
    errors = [s.error for s in summary.servers if s.error]
    errors += [r.error for r in summary.rows if r.error]
    return errors[0] if errors else "no request completed"


def pair_lines(
    inputs: ReportInputs, profile: Profile, reference: QualityReference
) -> list[PairLine]:
    lines = []
    for name, summary in sorted(inputs.pairs.items()):
        judged, passes = profile.representative(name)
        recipe: VariantRecord | None = inputs.variants.get(summary.variant)
        quality = inputs.quality.get(summary.variant)
        size = (recipe.size_bytes if recipe else None) or (quality.size_bytes if quality else None)
        server = summary.server(judged.row.server_point) if judged else None
        lines.append(
            PairLine(
                pair=name,
                variant=summary.variant,
                engine=summary.engine,
                format=summary.format,
                engine_version=summary.engine_version,
                judged=judged,
                passes=passes,
                quality=QualityDelta(summary.variant, quality, reference),
                size_bytes=size,
                server=server,
                currency=summary.currency,
                failure=_server_failure(summary),
            )
        )
    return lines


# ---------------------------------------------------------------------------------------------
# every measured point, flat: the charts' and the plots' data


@dataclass
class PointRow:
    pair: str
    variant: str
    engine: str
    server_point: str
    load_point: str
    load_kind: str | None
    load: float | None
    passed: bool | None
    values: dict[str, float | None] = field(default_factory=dict)
    intervals: dict[str, float | None] = field(default_factory=dict)
    """metric -> confidence half-width (repeats > 1)."""

    @property
    def label(self) -> str:
        return f"{self.pair} · {self.server_point} · {self.load_point}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "pair": self.pair,
            "variant": self.variant,
            "engine": self.engine,
            "server_point": self.server_point,
            "load_point": self.load_point,
            "load_kind": self.load_kind,
            "passed": self.passed,
            **{k: v for k, v in self.values.items()},
        }


ROW_METRICS = (*HEADLINE_METRICS, "cost_per_million_tokens")
QUALITY_METRICS = (
    "perplexity",
    "perplexity_ratio",
    "kl_mean",
    "kl_high",
    "top1_agreement",
    "heldout_accuracy",
)


def point_rows(inputs: ReportInputs, profile: Profile) -> list[PointRow]:
    """Every measured (pair, server point, load point) with its quality and memory joined."""
    out = []
    for judged in profile.rows:
        row = judged.row
        if not row.measured:
            continue
        summary = inputs.pairs[judged.pair]
        server = summary.server(row.server_point)
        quality = inputs.quality.get(judged.variant)
        recipe = inputs.variants.get(judged.variant)
        values: dict[str, float | None] = {m: row.metric(m) for m in ROW_METRICS}
        values["load"] = row.load_value
        rss = server.report.peak_rss_bytes if server else None
        values["peak_rss_mib"] = rss / MIB if rss else None
        size = (recipe.size_bytes if recipe else None) or (quality.size_bytes if quality else None)
        values["size_mib"] = size / MIB if size else None
        for key in QUALITY_METRICS:
            values[key] = quality_value(quality, key)
        intervals = {
            m: (
                iv.half_width
                if iv.half_width is not None and math.isfinite(iv.half_width)
                else None
            )
            for m, iv in row.intervals.items()
        }
        out.append(
            PointRow(
                pair=judged.pair,
                variant=judged.variant,
                engine=judged.engine,
                server_point=row.server_point,
                load_point=row.load_point,
                load_kind=row.load_kind,
                load=row.load_value,
                passed=row.slo_passed,
                values=values,
                intervals=intervals,
            )
        )
    return out
