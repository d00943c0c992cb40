"""The report's tables: one line per pair and profile, the ranking across workloads, every row
with its intervals and checks, quality deltas, and the formatting of numbers.

Everything here is computed from the loaded stage outputs and the judged profiles; the HTML,
Markdown and JSON writers only lay it out.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from quantbench.decision.profiles import JudgedRow, Profile
from quantbench.decision.rejudge import Verdict
from quantbench.outputs import HEADLINE_METRICS, ReportInputs
from quantbench.schemas import metrics as registry
from quantbench.schemas.bench import (
    HELDOUT_TASK,
    BenchRow,
    Interval,
    PairSummary,
    ServedTask,
    ServerPoint,
)
from quantbench.schemas.quality import QualityReport
from quantbench.schemas.variant import VariantRecord

MIB = 2**20

METRICS = registry.METRICS
"""Every reported figure by name (quantbench.schemas.metrics, the one registry)."""


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
# a figure with its interval, or "too few requests for p99"


def too_few_text(name: str) -> str:
    """'too few requests for p99' for a headline percentile such as 'ttft_p99_ms'."""
    parts = name.split("_")
    stat = next((p for p in parts if p.startswith("p") and p[1:].replace(".", "").isdigit()), "")
    return f"too few requests for {stat or name}"


def interval_text(value: float | None, iv: Interval | None, unit: str) -> str:
    """'84.3 [80.0, 88.6] tok/s' (the interval where there is one); '–' for no value.

    ``unit`` is 'ms' (shown in s from 10 s up), '%' for a share, or any unit written after."""
    if value is None or not math.isfinite(value):
        return "–"
    scale, shown = 1.0, unit
    if unit == "ms" and abs(value) >= 10000:
        scale, shown = 1000.0, "s"
    elif unit == "%":
        scale = 0.01
    text = num(value / scale)
    if iv is not None and math.isfinite(iv.low) and math.isfinite(iv.high):
        text += f" [{num(iv.low / scale)}, {num(iv.high / scale)}]"
    return f"{text} {shown}".rstrip() if shown else text


# The unit a headline figure's text is written in ('%' for a share: interval_text)
FIGURE_UNITS = {
    name: "%" if METRICS[name].share else METRICS[name].unit for name in HEADLINE_METRICS
}


def figure_text(row: BenchRow | None, name: str) -> str:
    """A headline figure of a row with its interval, or 'too few requests for pNN'."""
    if row is None or not row.measured:
        return "–"
    if name in row.too_few:
        return too_few_text(name)
    unit = FIGURE_UNITS.get(name, "")
    return interval_text(row.metric(name), row.intervals.get(name), unit)


def half_width(iv: Interval | None) -> float | None:
    if iv is None or not (math.isfinite(iv.low) and math.isfinite(iv.high)):
        return None
    return (iv.high - iv.low) / 2


def _count(value: float | None) -> str:
    """A load as configured: '4', '2.5'."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:g}" if float(value).is_integer() else num(value)


def load_parts(row: BenchRow) -> list[str]:
    """Offered against achieved load, one phrase each."""
    load = row.load
    if load is None:
        return ["–"]
    if row.load_kind == "rate":
        parts = [
            f"offered {_count(load.offered)}/s, achieved {num(load.achieved_rate)}/s",
            f"arrival lag p95 {ms(load.arrival_lag_p95_ms)}",
        ]
    else:
        parts = [f"offered {_count(load.offered)} streams"]
    parts.append(f"in flight: mean {num(load.mean_in_flight)}, peak {load.peak_in_flight}")
    if not load.reached:
        parts.append(f"not reached: {load.note or 'below its load'}")
    elif load.note:
        parts.append(load.note)
    return parts


def harness_text(row: BenchRow) -> str:
    if not row.measured:
        return "–"
    return "client kept up" if row.harness_ok else f"client-bound: {row.harness_note}"


def cache_text(row: BenchRow) -> str:
    """Prompt share a prefix cache could serve (from the prompts) against what it served."""
    cache = row.cache
    if cache is None:
        return "–"
    served = pct(cache.served_share) if cache.served_share is not None else "not reported"
    reset = f"; cache before the point: {cache.reset}" if cache.reset else ""
    return f"possible {pct(cache.possible_share)}, served {served}{reset}"


# The GPUs' counters over a row's measured windows: columns beside its throughput, shown only
# where some row of the table has them (a CPU run's tables are as they were).
GPU_COLUMNS = ("GPU util", "GPU memory", "GPU power")
GPU_NOTE = (
    "GPU: utilization mean (max) and SM clock mean, memory used at most, board power mean (max), "
    "sampled every {interval:g} s through the point's measured window (warm-up excluded), per GPU."
)


def any_gpu(rows: Iterable[BenchRow | None]) -> bool:
    """Whether any of ``rows`` carries GPU counters (the GPU columns are shown then only)."""
    return any(r is not None and r.gpu is not None for r in rows)


def gpu_note(rows: Iterable[BenchRow | None]) -> str:
    """What the GPU columns hold, at the rows' sampling interval."""
    interval = next((r.gpu.interval_s for r in rows if r is not None and r.gpu), 0.5)
    return GPU_NOTE.format(interval=interval)


def gpu_parts(row: BenchRow | None) -> list[list[str]]:
    """One cell per :data:`GPU_COLUMNS`, one line per GPU ('GPU1 ' before each where several):
    '87 % (max 92 %), SM 1,980 MHz'; '61,234 MiB'; '612 W (max 655 W)'."""
    gpu = row.gpu if row is not None else None
    if gpu is None or not gpu.devices:
        return [["–"] for _ in GPU_COLUMNS]

    def amount(value: float | None, unit: str) -> str:
        return "–" if value is None or not math.isfinite(value) else f"{value:,.0f} {unit}"

    util, memory, power = [], [], []
    for d in gpu.devices:
        name = f"GPU{d.index} " if len(gpu.devices) > 1 else ""
        clock = f", SM {amount(d.sm_clock_mean_mhz, 'MHz')}" if d.sm_clock_mean_mhz else ""
        util.append(
            f"{name}{amount(d.utilization_mean_pct, '%')} "
            f"(max {amount(d.utilization_max_pct, '%')}){clock}"
        )
        memory.append(f"{name}{amount(d.memory_used_max_mib, 'MiB')}")
        power.append(f"{name}{amount(d.power_mean_w, 'W')} (max {amount(d.power_max_w, 'W')})")
    return [util, memory, power]


def gpu_sort(row: BenchRow | None) -> list[float | str]:
    """The GPU columns' sort keys: the first GPU's mean utilization, most memory used and mean
    power ('' where there is none)."""
    gpu = row.gpu if row is not None else None
    if gpu is None or not gpu.devices:
        return ["" for _ in GPU_COLUMNS]
    d = gpu.devices[0]
    keys = (d.utilization_mean_pct, d.memory_used_max_mib, d.power_mean_w)
    return ["" if v is None else v for v in keys]


def sample_text(row: BenchRow) -> str:
    """How many repeats and requests the figures are from."""
    repeats = f"{row.repeats} repeat{'' if row.repeats == 1 else 's'}"
    detail = f"{row.completed} ok, {row.failed} failed, {row.not_served} not served"
    return f"{repeats}, {row.requests} requests ({detail})"


def why_not(judged: JudgedRow) -> list[str]:
    """Why a row is not ranked: its flags, the SLO's naming the constraints that failed or could
    not be decided."""
    row = judged.row
    missed = [v.reason for v in judged.verdicts if not v.passed]
    if not missed and not judged.verdicts:
        missed = [r for r in row.slo_reasons if r not in (row.error,)]
    out = []
    for flag in row.flags:
        if flag.startswith(("misses its SLO", "SLO undecided")) and missed:
            head = "misses its SLO" if flag.startswith("misses") else "SLO undecided"
            flag = f"{head}: {'; '.join(missed)}"
        out.append(flag)
    return out


def status_of(row: BenchRow | None) -> str:
    """pass (ranked), fail, undecided, flagged (met its SLO, failed a check), error, no SLO."""
    if row is None or not row.measured:
        return "error"
    if row.rankable:
        return "no SLO" if row.slo_verdict is None else "pass"
    if row.slo_verdict in ("fail", "undecided"):
        return str(row.slo_verdict)
    return "flagged"


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
# one line per pair under one workload's profile


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
    """Why the pair has no measurement for this workload (its server never came up), if so."""
    task: ServedTask | None = None
    """The fine-tune's task scored through the pair's server (None: not asked)."""

    @property
    def task_parts(self) -> list[str]:
        """The served task in a few short lines: accuracy with its interval, against offline."""
        return served_task_parts(self.task)

    @property
    def row(self) -> BenchRow | None:
        return self.judged.row if self.judged else None

    @property
    def peak_rss_bytes(self) -> int | None:
        """The server's memory: GPU plus host (its resident set alone on a CPU machine)."""
        return self.server.report.memory_bytes if self.server else None

    @property
    def peak_gpu_bytes(self) -> int | None:
        return self.server.report.peak_gpu_bytes if self.server else None

    @property
    def served_check(self) -> str:
        check = self.server.served_check if self.server else None
        return check.verdict if check is not None else "not checked"

    @property
    def verdicts(self) -> list[Verdict]:
        return self.judged.verdicts if self.judged else []

    @property
    def reasons(self) -> list[str]:
        """Every constraint's verdict for a ranked row; the flags (why not) otherwise."""
        if self.failure:
            return [self.failure]
        if self.judged is None:
            return ["no rows"]
        row = self.judged.row
        if self.passes:
            return [v.reason for v in self.verdicts] or list(row.slo_reasons)
        return why_not(self.judged) or list(row.slo_reasons)

    @property
    def status(self) -> str:
        if self.failure:
            return "error"
        return status_of(self.row)


def _server_failure(summary: PairSummary, workload: str) -> str | None:
    """The error that left the pair without a single measured point of the workload, if so."""
    rows = [r for r in summary.rows if r.workload == workload]
    if not rows:
        return f"did not run workload {workload} (rerun `dvc repro bench@{summary.pair}`)"
    if any(r.measured for r in rows):
        return None
    errors = [s.error for s in summary.servers if s.error]
    errors += [r.error for r in rows if r.error]
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
                failure=_server_failure(summary, profile.workload),
                task=summary.task,
            )
        )
    return lines


def served_task_accuracy(task: ServedTask | None) -> float | None:
    """The fine-tune's own task scored through the pair's server (its first server point), or
    None where it was not scored."""
    if task is None:
        return None
    score = next((s for s in task.scores if s.task == HELDOUT_TASK), None)
    return score.accuracy if score is not None else None


def served_task_parts(task: ServedTask | None) -> list[str]:
    """'9 of 13 right (41-87 %)', 'offline 10: agrees (p = 1)'; or why it was not scored."""
    if task is None:
        return ["not asked"]
    if not task.scores:
        return [task.verdict, task.note] if task.note else [task.verdict]
    parts = []
    for score in task.scores:
        name = "" if score.task == HELDOUT_TASK else f"{score.task}: "
        if score.correct is not None:
            text = f"{name}{score.correct} of {score.total} right"
        else:
            text = f"{name}{score.metric} {score.accuracy:.1%} ({score.total})"
        if score.interval is not None:
            text += f" ({score.interval[0]:.0%}-{score.interval[1]:.0%})"
        parts.append(text)
    agreed = task.agreement
    if agreed is not None:
        offline = agreed.both + agreed.offline_only
        parts.append(f"offline {offline}: {task.verdict} (p = {agreed.p_value:.2g})")
    else:
        parts.append(task.verdict)
    return parts


# ---------------------------------------------------------------------------------------------
# how the ranking changes between workloads


@dataclass
class RankCell:
    """One pair under one workload: its rank (1: the winner's pair), its figure, or why not."""

    judged: JudgedRow | None
    rank: int | None
    winner: bool
    tie: bool
    metric: str
    note: str = ""
    contender: bool = False
    """Not yet separable from the winner (more measurement would tell): not a tie."""

    @property
    def value(self) -> float | None:
        return self.judged.row.metric(self.metric) if self.judged else None

    @property
    def interval(self) -> Interval | None:
        return self.judged.row.intervals.get(self.metric) if self.judged else None

    def figure(self) -> str:
        if self.judged is None or self.rank is None:
            return "–"
        return interval_text(self.value, self.interval, "tok/s")


@dataclass
class RankingRow:
    pair: str
    variant: str
    engine: str
    cells: dict[str, RankCell]


def ranking(inputs: ReportInputs, profiles: list[Profile]) -> list[RankingRow]:
    """Pairs (rows) by workloads (columns, one per profile given): each pair at its best ranked
    point, ranked within the workload; the winner's pair is 1, the others follow by their value.
    A pair tied with the winner (shown equivalent within the margin) is marked as such, and so is
    a contender (not yet separable from it, or its SLO undecided and not shown slower)."""
    cells: dict[str, dict[str, RankCell]] = {name: {} for name in inputs.pairs}
    for profile in profiles:
        metric = profile.ranked_by
        tied_pairs = {t.pair for t in profile.ties}
        open_pairs = {t.pair for t in [*profile.unresolved, *profile.flagged]}
        ranked: list[JudgedRow] = []
        for name in sorted(inputs.pairs):
            judged, passes = profile.representative(name)
            if judged is not None and passes and judged.variant not in profile.gated:
                ranked.append(judged)
                continue
            if judged is None:
                note = "no rows"
            elif passes:
                note = f"not recommended for quality: {profile.gated[judged.variant]}"
            elif not judged.row.measured:
                note = "no measurement"
            else:
                note = "not ranked: " + "; ".join(why_not(judged) or ["no ranked row"])
            cells[name][profile.workload] = RankCell(judged, None, False, False, metric, note)
        winner = profile.best
        ranked.sort(
            key=lambda j: (
                not (winner is not None and j.pair == winner.pair),
                -(j.row.metric(metric) or 0.0),
            )
        )
        for position, judged in enumerate(ranked, 1):
            is_winner = winner is not None and judged.key == winner.key
            tie = not is_winner and judged.pair in tied_pairs
            contender = not is_winner and not tie and judged.pair in open_pairs
            cells[judged.pair][profile.workload] = RankCell(
                judged, position, is_winner, tie, metric, contender=contender
            )
    out = []
    for name, summary in sorted(inputs.pairs.items()):
        out.append(RankingRow(name, summary.variant, summary.engine, cells[name]))
    worst = len(inputs.pairs) + 1
    out.sort(key=lambda r: (sum(c.rank or worst for c in r.cells.values()), r.pair))
    return out


# ---------------------------------------------------------------------------------------------
# every measured row, flat: the charts' and the plots' data


@dataclass
class PointRow:
    pair: str
    variant: str
    engine: str
    workload: str
    server_point: str
    load_point: str
    load_kind: str | None
    load: float | None
    passed: bool | None
    """Whether the row may be ranked (met its SLO and every check); None: no SLO, no flag."""
    slo_verdict: str | None = None
    flags: list[str] = field(default_factory=list)
    values: dict[str, float | None] = field(default_factory=dict)
    intervals: dict[str, float | None] = field(default_factory=dict)
    """metric -> half-width of its confidence interval."""

    @property
    def label(self) -> str:
        return f"{self.pair} · {self.server_point} · {self.load_point}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "pair": self.pair,
            "variant": self.variant,
            "engine": self.engine,
            "workload": self.workload,
            "server_point": self.server_point,
            "load_point": self.load_point,
            "load_kind": self.load_kind,
            "passed": self.passed,
            "flags": "; ".join(self.flags),
            **{k: v for k, v in self.values.items()},
        }


# What each measured point carries: the row's headline figures in its field order, then every
# other figure a point has, in the registry's order (cost, load, memory, size, quality)
POINT_FIGURES = (
    *HEADLINE_METRICS,
    *(name for name in registry.PER_POINT if name not in HEADLINE_METRICS),
)


def figures(
    names: Iterable[str],
    row: BenchRow | None,
    memory_bytes: int | None,
    size_bytes: int | None,
    quality: QualityReport | None,
    task: ServedTask | None = None,
) -> dict[str, float | None]:
    """Each named figure, read where its :class:`~quantbench.schemas.metrics.Metric` says it
    comes from: the row's fields (None where it measured nothing) and its load, the server's
    memory and the variant's size (in MiB), the quality report, the served task."""
    measured = row is not None and row.measured
    out: dict[str, float | None] = {}
    for name in names:
        source = METRICS[name].source
        value: float | None = None
        if source == "row":
            value = row.metric(name) if row is not None and measured else None
        elif source == "point":
            value = row.load_value if row is not None else None
        elif source == "server":
            value = memory_bytes / MIB if memory_bytes else None
        elif source == "variant":
            value = size_bytes / MIB if size_bytes else None
        elif source == "quality":
            value = quality_value(quality, name)
        elif source == "served":
            value = served_task_accuracy(task)
        out[name] = value
    return out


def pair_figures(
    line: PairLine, inputs: ReportInputs, names: Iterable[str]
) -> dict[str, float | None]:
    """A pair's figures at its representative row of one workload (its quality and memory
    joined)."""
    quality = inputs.quality.get(line.variant)
    return figures(names, line.row, line.peak_rss_bytes, line.size_bytes, quality, line.task)


def point_rows(inputs: ReportInputs, profiles: list[Profile]) -> list[PointRow]:
    """Every measured (pair, server point, workload, load point) of the given profiles (one per
    workload), with its quality and memory joined."""
    out = []
    for profile in profiles:
        for judged in profile.rows:
            row = judged.row
            if not row.measured:
                continue
            quality = inputs.quality.get(judged.variant)
            recipe = inputs.variants.get(judged.variant)
            size = (recipe.size_bytes if recipe else None) or (
                quality.size_bytes if quality else None
            )
            # the server's memory: GPU + host
            values = figures(POINT_FIGURES, row, judged.peak_rss_bytes, size, quality)
            passed: bool | None = row.rankable
            if row.slo_verdict is None and row.rankable:
                passed = None
            out.append(
                PointRow(
                    pair=judged.pair,
                    variant=judged.variant,
                    engine=judged.engine,
                    workload=profile.workload,
                    server_point=row.server_point,
                    load_point=row.load_point,
                    load_kind=row.load_kind,
                    load=row.load_value,
                    passed=passed,
                    slo_verdict=row.slo_verdict,
                    flags=list(row.flags),
                    values=values,
                    intervals={m: half_width(iv) for m, iv in row.intervals.items()},
                )
            )
    return out
