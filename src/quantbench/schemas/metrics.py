"""The figures quantbench reports, one declaration each: every table, chart, file column and
setting that names a set of metrics takes it from here.

A :class:`Metric` says what a figure is (its key in every file and table, its label and unit,
which way is better, where its value comes from) and where it appears: a headline figure of a
bench row, a recommendation's figures, each pair's record in ``report_metrics.json`` and
``plots/pairs.csv``, the brief ``dvc exp show`` columns, the curves against load, the free-axes
chart, the Pareto charts' axes. The lists the other modules use are selections of
:data:`METRICS` (:func:`select`), in its order, which is the order a reader meets them: the
ranked figures first, then rates, latencies, cost, errors, the load, memory, size, quality.

To add a figure, declare it here and give it a value where its source is read
(``quantbench.report.tables.figures``); a row figure is also a :class:`BenchRow` field
(``quantbench.schemas.bench``) and, when it is a headline, a field of best_config.json's
``expected``. Files keep their metric keys across versions: DVC compares
``report_metrics.json`` and the plots' CSVs by key across runs, as written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Better = Literal["max", "min"]
Source = Literal["row", "point", "server", "variant", "quality", "served"]
"""Where a figure's value is read: ``row`` a bench row's field (:class:`BenchRow`), ``point`` its
load point, ``server`` the server's memory, ``variant`` the variant on disk, ``quality`` its
quality report (against the merged model), ``served`` the pair's task scored through its
server (one value per pair, none per point)."""
Axis = Literal["latency", "quality"]


@dataclass(frozen=True)
class Metric:
    """One reported figure and every place it appears."""

    name: str
    """Its key in every file, table and chart (a :class:`BenchRow` field where ``source`` is
    ``row``)."""
    label: str
    unit: str
    better: Better
    """``max``: higher is better; ``min``: lower is better."""
    source: Source
    description: str
    digits: int = 3
    """Significant digits in tables."""
    share: bool = False
    """A fraction of one: a headline figure's text writes it in %."""
    currency: bool = False
    """In the run's currency (its unit is known only then)."""
    headline: bool = False
    """A bench row's figure with its interval (``BenchRow.intervals``), every one of them in
    best_config.json's ``expected``."""
    shown: bool = False
    """Among a recommendation's figures (summary.md, index.html), after the ranked one."""
    pair: bool = False
    """In each pair's record at its best point: ``report_metrics.json``'s ``recommended``,
    ``plots/pairs.csv``, the Pareto charts' pair points."""
    brief: bool = False
    """In ``report_metrics.json``'s ``pairs`` (few enough columns for ``dvc exp show``)."""
    sweepable: bool = False
    """Drawn against the load, one curve per pair and server setting."""
    explorer: bool = False
    """An axis the free-axes chart offers."""
    axis: Axis | None = None
    """Which Pareto axis it may be: ``report.latency_axis`` or ``report.quality_axis``."""

    def title(self) -> str:
        """'TTFT p50 (ms)': the label with its unit."""
        return f"{self.label} ({self.unit})" if self.unit else self.label


_LATENCIES = {
    "ttft": ("TTFT", "time to the first token"),
    "tpot": ("TPOT", "mean time per output token after the first, per request"),
    "itl": ("ITL", "the gaps between streamed chunks"),
    "e2e": ("E2E", "request start to its last token"),
}


def _latency(
    kind: str,
    pct: int,
    *,
    shown: bool = False,
    pair: bool = False,
    brief: bool = False,
    sweepable: bool = False,
    explorer: bool = False,
    axis: Axis | None = None,
) -> Metric:
    """A latency percentile of a bench row, a headline figure: 'ttft_p90_ms', 'TTFT p90', ms."""
    short, what = _LATENCIES[kind]
    return Metric(
        f"{kind}_p{pct}_ms", f"{short} p{pct}", "ms", "min", "row",
        f"{short}, {what}: the {pct}th percentile over the measured requests.",
        headline=True, shown=shown, pair=pair, brief=brief, sweepable=sweepable,
        explorer=explorer, axis=axis,
    )  # fmt: skip


# Every figure, in the order a reader meets them (the lists below keep it).
_DECLARED = (
    Metric(
        "good_output_throughput", "Good output throughput", "tok/s", "max", "row",
        "Output tokens per second of the requests that met every per-request SLO constraint: "
        "what the best configuration is chosen by where the SLO sets a latency limit.",
        headline=True, shown=True, pair=True, brief=True, sweepable=True, explorer=True,
    ),
    Metric(
        "output_throughput", "Output throughput", "tok/s", "max", "row",
        "Output tokens per second over the measured window.",
        headline=True, shown=True, pair=True, brief=True, sweepable=True, explorer=True,
    ),
    Metric(
        "goodput", "Goodput", "req/s", "max", "row",
        "Requests per second that met every per-request SLO constraint.",
        headline=True, shown=True, pair=True, sweepable=True, explorer=True,
    ),
    Metric(
        "request_throughput", "Request throughput", "req/s", "max", "row",
        "Completed requests per second.",
        headline=True, sweepable=True, explorer=True,
    ),
    _latency("ttft", 50, shown=True, pair=True, sweepable=True, explorer=True, axis="latency"),
    _latency("ttft", 90, shown=True, pair=True, brief=True, sweepable=True, explorer=True),
    _latency("ttft", 99, shown=True, pair=True, sweepable=True, explorer=True, axis="latency"),
    _latency("tpot", 50, shown=True, pair=True, brief=True, sweepable=True, explorer=True,
             axis="latency"),
    _latency("tpot", 90, shown=True, pair=True),
    _latency("tpot", 99, shown=True, pair=True, sweepable=True, explorer=True, axis="latency"),
    _latency("itl", 50, axis="latency"),
    _latency("itl", 99, explorer=True, axis="latency"),
    _latency("e2e", 50, explorer=True, axis="latency"),
    _latency("e2e", 99, shown=True, pair=True, sweepable=True, explorer=True, axis="latency"),
    Metric(
        "cost_per_million_tokens", "Cost per 1M output tokens", "", "min", "row",
        "The price of a million output tokens at bench.price_per_hour and the row's output "
        "throughput.",
        currency=True, pair=True, brief=True, sweepable=True, explorer=True,
    ),
    Metric(
        "error_rate", "Error rate", "", "min", "row",
        "(failed + not served) / measured requests.",
        share=True, headline=True, shown=True, sweepable=True, explorer=True,
    ),
    Metric(
        "load", "Load (concurrency or req/s)", "", "max", "point",
        "The load point: concurrent streams (closed loop) or arrival rate in requests per "
        "second (open loop).",
        explorer=True,
    ),
    Metric(
        "peak_rss_mib", "Peak server memory", "MiB", "min", "server",
        "The server's peak memory (ServerReport.memory_bytes): the GPU memory of its processes "
        "plus their host resident set; on a CPU machine the resident set alone. The key is from "
        "when it was the resident set alone, and stays: DVC compares report_metrics.json and "
        "the plots' CSVs by key across runs.",
        pair=True, brief=True, explorer=True,
    ),
    Metric(
        "size_mib", "Size on disk", "MiB", "min", "variant",
        "The variant's files on disk.",
        pair=True, explorer=True,
    ),
    Metric(
        "perplexity", "Perplexity", "", "min", "quality",
        "Perplexity on the evaluation text.",
        pair=True, explorer=True,
    ),
    Metric(
        "perplexity_ratio", "Perplexity / merged model", "x", "min", "quality",
        "The variant's perplexity over the merged model's on the same text.",
        digits=4, pair=True, brief=True, explorer=True, axis="quality",
    ),
    Metric(
        "kl_mean", "KL divergence, mean", "nats", "min", "quality",
        "Mean KL divergence of the variant's next-token distribution from the merged model's.",
        pair=True, explorer=True, axis="quality",
    ),
    Metric(
        "kl_high", "KL divergence, high percentile", "nats", "min", "quality",
        "The KL divergence at the quality report's high percentile (kl_divergence.high).",
        pair=True, axis="quality",
    ),
    Metric(
        "top1_agreement", "Top-1 agreement with merged", "", "max", "quality",
        "Share of positions where the variant's most likely next token is the merged model's.",
        share=True, pair=True, explorer=True, axis="quality",
    ),
    Metric(
        "heldout_accuracy", "Held-out accuracy", "", "max", "quality",
        "The fine-tune's held-out questions answered right, scored offline on the variant.",
        share=True, pair=True, brief=True, explorer=True, axis="quality",
    ),
    Metric(
        "task_accuracy", "Task accuracy, served", "", "max", "served",
        "The fine-tune's task scored through the pair's own server (its first server point).",
        share=True, axis="quality",
    ),
)  # fmt: skip

METRICS: dict[str, Metric] = {m.name: m for m in _DECLARED}
"""Every figure by its name, in the order a reader meets them."""
if len(METRICS) != len(_DECLARED):
    raise ValueError("quantbench.schemas.metrics: a name is declared twice")


def select(keep: Callable[[Metric], bool]) -> tuple[str, ...]:
    """The names of the metrics ``keep`` accepts, in :data:`METRICS`' order."""
    return tuple(name for name, m in METRICS.items() if keep(m))


HEADLINE = select(lambda m: m.headline)
"""A bench row's figures with intervals (``schemas.bench.HEADLINE_FIGURES`` keeps them in the
row's field order)."""
SHOWN = select(lambda m: m.shown)
PAIR = select(lambda m: m.pair)
BRIEF = select(lambda m: m.brief)
EXPLORER = select(lambda m: m.explorer)
SWEEP = select(lambda m: m.sweepable and m.headline) + select(
    lambda m: m.sweepable and not m.headline
)
"""The curves against load: the row's headline figures, then what they cost."""
LATENCY_AXES = select(lambda m: m.axis == "latency")
QUALITY_AXES = select(lambda m: m.axis == "quality")
QUALITY = select(lambda m: m.source == "quality")
"""The figures of a variant's quality report."""
PER_POINT = select(lambda m: m.source != "served")
"""What each measured point carries (the pair's served task is one value per pair)."""


__all__ = [
    "BRIEF",
    "EXPLORER",
    "HEADLINE",
    "LATENCY_AXES",
    "METRICS",
    "PAIR",
    "PER_POINT",
    "QUALITY",
    "QUALITY_AXES",
    "SHOWN",
    "SWEEP",
    "Axis",
    "Better",
    "Metric",
    "Source",
    "select",
]
