"""The first screen, per workload: the recommendation with its status, one chart and a compact
table of the pairs, each row's verdict one word.

The rows are each pair at its representative row (the winner's where it is the winner's pair,
else the pair's own best, else its nearest miss: ``Profile.representative``), and then every
row the decision names that is not one already (a tie, or a contender not yet separable, of the
winner's own pair at another setting), so the configurations a provisional decision could not
tell apart stand side by side. summary.md draws the chart as text (:func:`text_chart`); the page
draws it with plotly (``charts.overview_scatter``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from quantbench.decision.profiles import JudgedRow, Profile
from quantbench.outputs import ReportInputs
from quantbench.report.tables import (
    METRICS,
    PairLine,
    figure_text,
    interval_text,
    mib,
    num,
    quality_value,
    served_task_accuracy,
    signed_pct,
    status_of,
)

# One word per row, and what it means (the legend under the table).
VERDICTS: dict[str, str] = {
    "winner": "the recommendation",
    "tied": "shown equivalent within the margin; a tie-break chose the winner",
    "unsettled": "not yet separable from the leader, or its SLO undecided and not shown "
    "slower: more measurement would tell",
    "slower": "shown slower than the leader",
    "ranked": "ranked, not compared with the leader",
    "gated": "its variant fails the quality gate",
    "missed": "misses its SLO",
    "undecided": "its SLO verdict is undecided",
    "flagged": "failed a check (load, lengths, client, served check)",
    "failed": "no measurement",
}
GREY = frozenset({"gated", "missed", "undecided", "flagged", "failed"})
"""Verdicts of rows that may not be recommended: greyed in the chart, lower-case in text."""
ORDER = {v: i for i, v in enumerate(VERDICTS)}


@dataclass(frozen=True)
class OverviewRow:
    """One configuration on the first screen."""

    pair: str
    variant: str
    engine: str
    judged: JudgedRow | None
    verdict: str
    quality: float | None
    """The quality measure of the chart's axis (report.quality_axis)."""
    memory_bytes: int | None
    mark: str = ""
    """The row's letter in summary.md's text chart (A, B, ...)."""

    @property
    def grey(self) -> bool:
        return self.verdict in GREY

    @property
    def where(self) -> str:
        r = self.judged.row if self.judged else None
        return f"{r.server_point} @ {r.load_point}" if r is not None and r.measured else "–"

    @property
    def label(self) -> str:
        return f"{self.variant} on {self.engine}"

    def value(self, metric: str) -> float | None:
        r = self.judged.row if self.judged else None
        return r.metric(metric) if r is not None and r.measured else None

    def interval(self, metric: str) -> tuple[float, float] | None:
        r = self.judged.row if self.judged else None
        iv = r.intervals.get(metric) if r is not None and r.measured else None
        if iv is None or not (math.isfinite(iv.low) and math.isfinite(iv.high)):
            return None
        return iv.low, iv.high

    def figure(self, metric: str) -> str:
        r = self.judged.row if self.judged else None
        return figure_text(r, metric) if r is not None and r.measured else "–"

    def compact(self, metric: str) -> str:
        """The figure and its interval without its unit (the header has it), or 'too few'."""
        r = self.judged.row if self.judged else None
        if r is None or not r.measured:
            return "–"
        if metric in r.too_few:
            return "too few"
        iv = r.intervals.get(metric)
        return interval_text(r.metric(metric), iv, "")


def quality_text(value: float | None, key: str) -> str:
    """'+5.6 %' for a perplexity ratio (its change against the merged model), else the value."""
    if value is None:
        return "–"
    if key == "perplexity_ratio":
        return signed_pct(value - 1.0)
    return num(value, METRICS[key].digits)


QUALITY_HEADERS = {
    "perplexity_ratio": "perplexity vs merged",
    "kl_mean": "KL (nats)",
    "kl_high": "KL high (nats)",
    "top1_agreement": "top-1 agreement",
    "heldout_accuracy": "held-out accuracy",
    "task_accuracy": "task accuracy, served",
}
SHORT = {"good_output_throughput": "good tok/s", "output_throughput": "tok/s"}


def quality_header(key: str) -> str:
    return QUALITY_HEADERS.get(key, METRICS[key].label)


def metric_header(key: str) -> str:
    """'good tok/s', 'TTFT p90 (ms)': a compact column's name with its unit."""
    m = METRICS[key]
    return SHORT.get(key) or (f"{m.label} ({m.unit})" if m.unit else m.label)


def _verdict(
    judged: JudgedRow | None, profile: Profile, failure: str | None, flagged: set[str]
) -> str:
    decision = profile.decision
    if failure or judged is None or not judged.row.measured:
        return "failed"
    if profile.best is not None and judged.key == profile.best.key:
        return "winner"
    if judged.variant in profile.gated:
        return "gated"
    if judged.key in flagged:
        return "unsettled"
    if any(t.key == judged.key for t in profile.ties):
        return "tied"  # the leader too, where a tie-break chose another row
    if not judged.rankable:
        status = status_of(judged.row)
        return {"fail": "missed", "undecided": "undecided"}.get(status, "flagged")
    c = decision.comparisons.get(judged.key) if decision is not None else None
    if c is None:
        return "ranked"
    return {"equivalent": "tied", "not yet separable": "unsettled", "slower": "slower"}.get(
        c.verdict, "ranked"
    )


def _quality(
    inputs: ReportInputs, judged: JudgedRow | None, variant: str, key: str
) -> float | None:
    if key == "task_accuracy":
        summary = inputs.pairs.get(judged.pair) if judged is not None else None
        return served_task_accuracy(summary.task) if summary is not None else None
    return quality_value(inputs.quality.get(variant), key)


def overview_rows(
    inputs: ReportInputs, profile: Profile, lines: list[PairLine], quality_key: str
) -> list[OverviewRow]:
    """The first screen's rows: each pair's line, then every row the decision names that is
    not one of them; the winner first, then by verdict and the ranked figure."""
    decision = profile.decision
    flagged = {c.key for c in decision.flagged} if decision is not None else set()
    rows: list[OverviewRow] = []
    shown: set[str] = set()
    for line in lines:
        judged = line.judged if not line.failure else None
        rows.append(
            OverviewRow(
                line.pair, line.variant, line.engine, judged,
                _verdict(judged, profile, line.failure, flagged),
                _quality(inputs, judged, line.variant, quality_key), line.peak_rss_bytes,
            )
        )  # fmt: skip
        if judged is not None:
            shown.add(judged.key)
    named = [*profile.ties, *profile.unresolved, *profile.flagged]
    for judged in named:
        if judged.key in shown:
            continue
        shown.add(judged.key)
        rows.append(
            OverviewRow(
                judged.pair, judged.variant, judged.engine, judged,
                _verdict(judged, profile, None, flagged),
                _quality(inputs, judged, judged.variant, quality_key), judged.peak_rss_bytes,
            )
        )  # fmt: skip
    metric = profile.ranked_by
    rows.sort(key=lambda r: (ORDER.get(r.verdict, 99), -(r.value(metric) or 0.0), r.pair))
    marks = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [
        OverviewRow(r.pair, r.variant, r.engine, r.judged, r.verdict, r.quality,
                    r.memory_bytes, marks[i] if i < len(marks) else "?")
        for i, r in enumerate(rows)
    ]  # fmt: skip


def compact_cells(row: OverviewRow, metric: str, quality_key: str) -> list[str]:
    """configuration, setting @ load, quality, memory, ranked figure, TTFT p90, TPOT p50,
    verdict (plain text; the Markdown and the page escape it)."""
    return [
        row.label,
        row.where,
        quality_text(row.quality, quality_key),
        mib(row.memory_bytes),
        row.compact(metric),
        row.compact("ttft_p90_ms"),
        row.compact("tpot_p50_ms"),
        row.verdict,
    ]


def compact_header(metric: str, quality_key: str) -> list[str]:
    return [
        "configuration", "setting @ load", quality_header(quality_key), "peak memory",
        metric_header(metric), metric_header("ttft_p90_ms"), metric_header("tpot_p50_ms"),
        "verdict",
    ]  # fmt: skip


def anchor(name: str) -> str:
    """A fragment id for a workload's details ('details-multi-turn')."""
    return "details-" + (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "workload")


# ---------------------------------------------------------------------------------------------
# the chart as text, for summary.md


def text_chart(
    rows: list[OverviewRow], metric: str, quality_key: str, width: int = 40, height: int = 7
) -> list[str]:
    """The ranked figure (up) against the quality measure (across), one letter per row (the
    table's first column; lower case: a row that may not be recommended, greyed on the page);
    [] when fewer than one row has both."""
    pts = [
        (r.quality, r.value(metric), r)
        for r in rows
        if r.quality is not None and r.value(metric) is not None
    ]
    if not pts:
        return []
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = _span(min(xs), max(xs))  # type: ignore[arg-type]
    y0, y1 = _span(min(ys), max(ys))  # type: ignore[arg-type]
    grid = [[" "] * width for _ in range(height)]
    for x, y, r in sorted(pts, key=lambda p: p[2].grey, reverse=True):  # ranked rows on top
        col = round((x - x0) / (x1 - x0) * (width - 1))  # type: ignore[operator]
        line = height - 1 - round((y - y0) / (y1 - y0) * (height - 1))  # type: ignore[operator]
        mark = r.mark.lower() if r.grey else r.mark
        while col < width and grid[line][col] != " ":
            col += 1  # two rows in one cell: the later one beside it
        if col < width:
            grid[line][col] = mark
    unit = METRICS[metric].unit
    top, bottom = num(y1), num(y0)
    pad = max(len(top), len(bottom))
    out = [f"{METRICS[metric].label} ({unit})" if unit else METRICS[metric].label]
    for i, cells in enumerate(grid):
        label = top if i == 0 else bottom if i == height - 1 else ""
        tick = "┤" if label else "│"
        out.append(f"{label:>{pad}} {tick}{''.join(cells).rstrip()}")
    out.append(" " * pad + " └" + "─" * width)
    left, right = quality_text(x0, quality_key), quality_text(x1, quality_key)
    axis = quality_header(quality_key)
    gap = max(1, width - len(left) - len(right))
    out.append(" " * (pad + 2) + left + " " * gap + right)
    better = "lower" if METRICS[quality_key].better == "min" else "higher"
    out.append(" " * (pad + 2) + f"{axis}, {better} is better")
    return out


def _span(low: float, high: float) -> tuple[float, float]:
    """The axis range: the values with a margin (a single value gets one around it), never
    below 0 for values that are not."""
    pad = (high - low) * 0.08 if high > low else (abs(low) * 0.05 or 1.0)
    start = low - pad
    return (0.0 if low >= 0 > start else start), high + pad
