"""Plotly figures for the report, as JSON-ready dicts (plotly.js draws them in the page).

Figures are built with plotly's Python objects, which validate every property, then exported
without their template: the page embeds one shared template and plotly.js once. Any text that
reaches a figure (pair names, settings) is HTML-escaped, because plotly.js renders a subset of
HTML in labels.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from quantbench.decision.profiles import JudgedRow, Profile
from quantbench.outputs import PointKey, ReportInputs, clean_json
from quantbench.report.estimates import EstimateRow
from quantbench.report.overview import OverviewRow, metric_header
from quantbench.report.pareto import front
from quantbench.report.tables import (
    METRICS,
    PairLine,
    PointRow,
    mib,
    num,
    pair_figures,
)
from quantbench.schemas import metrics as registry

PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
)  # fmt: skip
TEMPLATE = "plotly_white"
HEIGHT = 430
BEST_COLOR = "#f2b701"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def colors_for(names: Sequence[str]) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(set(names)))}


def template_json() -> dict[str, Any]:
    """The one template every figure uses (embedded once in the page)."""
    from plotly.utils import PlotlyJSONEncoder

    template = pio.templates[TEMPLATE].to_plotly_json()
    return clean_json(json.loads(json.dumps(template, cls=PlotlyJSONEncoder)))


def to_json(fig: go.Figure) -> dict[str, Any]:
    data = json.loads(fig.to_json())
    data.get("layout", {}).pop("template", None)
    return clean_json(data)


def _layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": esc(title), "x": 0.01, "font": {"size": 15}},
        "xaxis": {"title": {"text": esc(x)}, "zeroline": False},
        "yaxis": {"title": {"text": esc(y)}, "zeroline": False},
        "height": HEIGHT,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "legend": {"orientation": "h", "y": -0.18, "x": 0},
        "hovermode": "closest",
        **extra,
    }


def axis_title(key: str, currency: str = "") -> str:
    metric = METRICS[key]
    if metric.currency:
        return f"{metric.label} ({currency})" if currency else metric.label
    return metric.title()


def _status(point: PointRow) -> str:
    if point.passed is None:
        return "no SLO"
    if point.passed:
        return "meets its SLO and every check"
    return "not ranked: " + esc("; ".join(point.flags))[:300]


def _hover(point: PointRow, x: str, y: str) -> str:
    status = _status(point)
    return (
        f"<b>{esc(point.pair)}</b><br>setting {esc(point.server_point)}, load "
        f"{esc(point.load_point)}<br>{esc(METRICS[x].label)}: {_fmt(point.values.get(x))}<br>"
        f"{esc(METRICS[y].label)}: {_fmt(point.values.get(y))}<br>{status}"
    )


def _fmt(value: float | None) -> str:
    return num(value)


def _xy(point: PointRow, x: str, y: str) -> tuple[float, float] | None:
    a, b = point.values.get(x), point.values.get(y)
    return (a, b) if a is not None and b is not None else None


def _front_trace(xy: list[tuple[float, float]], name: str = "Pareto front") -> go.Scatter:
    return go.Scatter(
        x=[p[0] for p in xy],
        y=[p[1] for p in xy],
        mode="lines+markers",
        name=name,
        line={"color": "rgba(60,60,60,0.6)", "dash": "dot", "width": 2},
        marker={
            "size": 16,
            "symbol": "circle-open",
            "color": "rgba(60,60,60,0.8)",
            "line": {"width": 2},
        },
        hoverinfo="skip",
    )


def _best_trace(x: float, y: float, label: str) -> go.Scatter:
    return go.Scatter(
        x=[x],
        y=[y],
        mode="markers",
        name="Recommended",
        marker={
            "size": 22,
            "symbol": "star",
            "color": BEST_COLOR,
            "line": {"width": 1, "color": "#333"},
        },
        hovertext=[f"<b>Recommended</b><br>{esc(label)}"],
        hoverinfo="text",
    )


def points_scatter(
    points: Sequence[PointRow],
    x: str,
    y: str,
    colors: dict[str, str],
    title: str,
    best: JudgedRow | None,
    currency: str = "",
    connect_front: bool = True,
) -> dict[str, Any]:
    """Every point as a marker per pair (open marker: not ranked), the front of the ranked ones,
    the winner."""
    fig = go.Figure()
    for pair in sorted({p.pair for p in points}):
        mine = [p for p in points if p.pair == pair and _xy(p, x, y) is not None]
        if not mine:
            continue
        fig.add_trace(
            go.Scatter(
                x=[p.values[x] for p in mine],
                y=[p.values[y] for p in mine],
                mode="markers",
                name=esc(pair),
                marker={
                    "size": 11,
                    "color": colors[pair],
                    "symbol": ["circle-open" if p.passed is False else "circle" for p in mine],
                    "line": {"width": 2, "color": colors[pair]},
                },
                hovertext=[_hover(p, x, y) for p in mine],
                hoverinfo="text",
            )
        )
    coords = [_xy(p, x, y) for p in points]
    eligible = [
        c if (c is not None and p.passed is not False) else None
        for c, p in zip(coords, points, strict=True)
    ]
    idx = front(eligible, METRICS[x].better, METRICS[y].better)
    if connect_front and idx:
        fig.add_trace(_front_trace([eligible[i] for i in idx if eligible[i] is not None]))  # type: ignore[misc]
    if best is not None:
        match = next(
            (
                p
                for p in points
                if p.pair == best.pair
                and p.workload == best.workload
                and p.server_point == best.row.server_point
                and p.load_point == best.row.load_point
            ),
            None,
        )
        if match is not None and _xy(match, x, y) is not None:
            fig.add_trace(_best_trace(match.values[x], match.values[y], match.label))  # type: ignore[arg-type]
    fig.update_layout(**_layout(title, axis_title(x, currency), axis_title(y, currency)))
    return to_json(fig)


# A pair's point on the quality and memory charts: its record's figures and its served task
PAIR_FIGURES = (*registry.PAIR, *registry.select(lambda m: m.source == "served"))


def pair_points(lines: Sequence[PairLine], inputs: ReportInputs, workload: str) -> list[PointRow]:
    """The pairs' representative rows of one workload as points (quality and memory joined)."""
    out = []
    for line in lines:
        row = line.row
        if row is None or not row.measured:
            continue
        values = pair_figures(line, inputs, PAIR_FIGURES)
        out.append(
            PointRow(
                pair=line.pair,
                variant=line.variant,
                engine=line.engine,
                workload=workload,
                server_point=row.server_point,
                load_point=row.load_point,
                load_kind=row.load_kind,
                load=row.load_value,
                passed=line.passes if row.slo_verdict is not None else None,
                flags=list(row.flags),
                values=values,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# the first screen's chart: the ranked figure against quality, marker area memory

GREYED = "#b8bec5"


def _marker_size(memory: float | None, top: float) -> float:
    """A marker's diameter, its area following peak memory against the largest shown (up to
    40 px; 16 where it is unknown)."""
    return 40 * float(np.sqrt(memory / top)) if memory and top > 0 else 16.0


def overview_scatter(
    rows: Sequence[OverviewRow],
    metric: str,
    quality_key: str,
    colors: dict[str, str],
    title: str,
    height: int = 300,
) -> dict[str, Any]:
    """Each configuration of the first screen: its ranked figure (with its interval) against its
    variant's quality, marker area its server's peak memory; rows that may not be recommended
    (SLO missed or undecided, a check failed, the quality gate) greyed; the winner ringed in gold
    and starred."""
    pts = [r for r in rows if r.quality is not None and r.value(metric) is not None]
    top = max((r.memory_bytes or 0 for r in pts), default=0)
    fig = go.Figure()
    for grey in (True, False):
        mine = [r for r in pts if r.grey == grey]
        if not mine:
            continue
        ivs = [r.interval(metric) for r in mine]
        ys = [r.value(metric) or 0.0 for r in mine]
        fig.add_trace(
            go.Scatter(
                x=[r.quality for r in mine],
                y=ys,
                mode="markers+text",
                name="may not be recommended" if grey else "rankable",
                # the compact table's letters; the winner's starred, its marker ringed in gold
                # (a star over it would hide the memory its size shows)
                text=[esc(r.mark + (" ★" if r.verdict == "winner" else "")) for r in mine],
                textposition="middle right",
                textfont={"size": 13, "color": "#8a929b" if grey else "#1d232a"},
                marker={
                    "size": [max(8.0, _marker_size(r.memory_bytes, top)) for r in mine],
                    "color": [GREYED if grey else colors.get(r.pair, PALETTE[0]) for r in mine],
                    "opacity": 0.55 if grey else 0.85,
                    "line": {
                        "width": [3 if r.verdict == "winner" else 1 for r in mine],
                        "color": [
                            BEST_COLOR if r.verdict == "winner" else "#6b737b" if grey else "#333"
                            for r in mine
                        ],
                    },
                },
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [iv[1] - y if iv else 0 for iv, y in zip(ivs, ys, strict=True)],
                    "arrayminus": [y - iv[0] if iv else 0 for iv, y in zip(ivs, ys, strict=True)],
                    "color": "#8a929b" if grey else "#555",
                    "thickness": 1.2,
                    "width": 0,  # no caps: inside a marker they read as a glyph
                },
                hovertext=[
                    f"<b>{esc(r.label)}</b> ({esc(r.where)})<br>{esc(METRICS[metric].label)}: "
                    f"{esc(r.figure(metric))}<br>{esc(METRICS[quality_key].label)}: "
                    f"{_fmt(r.quality)}<br>peak memory: {esc(mib(r.memory_bytes))}<br>"
                    f"verdict: {esc(r.verdict)}"
                    for r in mine
                ],
                hoverinfo="text",
                showlegend=False,
            )
        )
    layout = _layout(title, axis_title(quality_key), metric_header(metric))
    # the card above says which workload: no title, the whole height for the points
    layout.update(height=height, margin={"l": 58, "r": 12, "t": 12, "b": 42}, title=None)
    fig.update_layout(**layout)
    # room for the markers (up to 40 px) and their letters at both ends
    xs = [r.quality for r in pts if r.quality is not None]
    if xs:
        lo, hi = min(xs), max(xs)
        span = (hi - lo) or abs(hi) * 0.1 or 1.0
        fig.update_xaxes(range=[lo - 0.15 * span, hi + 0.2 * span])
    if METRICS[quality_key].better == "min":
        fig.update_xaxes(title={"text": esc(axis_title(quality_key)) + " ← better"})
    else:
        fig.update_xaxes(title={"text": esc(axis_title(quality_key)) + " → better"})
    fig.update_yaxes(rangemode="tozero")
    return to_json(fig)


# ---------------------------------------------------------------------------------------------
# latency distributions from the raw records


DISTRIBUTIONS = {
    "ttft": "Time to first token",
    "tpot": "Time per output token",
    "itl": "Inter-token latency",
    "e2e": "End-to-end latency",
}


def thin(values: Sequence[float], limit: int) -> list[float]:
    """At most `limit` evenly spaced order statistics (min and max kept)."""
    xs = np.sort(np.asarray(values, dtype=float))
    if len(xs) <= limit:
        return xs.tolist()
    picks = np.linspace(0, len(xs) - 1, limit).round().astype(int)
    return xs[picks].tolist()


def latency_samples(inputs: ReportInputs, key: PointKey) -> dict[str, list[float]]:
    """Per-request latencies (ms) of a point's completed measured requests, repeats pooled."""
    out: dict[str, list[float]] = {k: [] for k in DISTRIBUTIONS}
    for rep in inputs.records.get(key, []):
        for r in rep.records:
            if r.status != "completed" or r.phase != "measured":
                continue
            for name in ("ttft", "tpot", "e2e"):
                value = getattr(r, name)
                if value is not None:
                    out[name].append(value * 1000)
            out["itl"].extend(g * 1000 for g in r.itls)
    return out


def distributions(
    inputs: ReportInputs, profile: Profile, colors: dict[str, str], limit: int
) -> dict[str, dict[str, Any]]:
    """One box plot per latency: a box per measured point, its raw requests as dots."""
    figs: dict[str, dict[str, Any]] = {}
    samples = {}
    for judged in profile.rows:
        if judged.row.measured:
            row = judged.row
            key = PointKey(judged.pair, row.server_point, row.workload, row.load_point)
            samples[judged.label] = (judged.pair, latency_samples(inputs, key))
    for metric, title in DISTRIBUTIONS.items():
        fig = go.Figure()
        for label, (pair, values) in samples.items():
            data = thin(values[metric], limit)
            if not data:
                continue
            fig.add_trace(
                go.Box(
                    y=data,
                    name=esc(label),
                    legendgroup=esc(pair),
                    marker={"color": colors[pair], "size": 4},
                    boxpoints="all" if len(data) <= 300 else "outliers",
                    jitter=0.4,
                    pointpos=0,
                    boxmean=True,
                    hoverinfo="y+name",
                )
            )
        fig.update_layout(
            **_layout(
                f"{title} per request", "pair · server setting · load point", f"{title} (ms)"
            ),
            showlegend=False,
        )
        fig.update_xaxes(tickangle=-25, automargin=True)
        fig.update_yaxes(rangemode="tozero")
        figs[metric] = to_json(fig)
    return figs


# ---------------------------------------------------------------------------------------------
# sweep curves: metric vs load, one line per (pair, server setting)


SWEEP_METRICS = registry.SWEEP


def sweeps(
    points: Sequence[PointRow], colors: dict[str, str], currency: str
) -> dict[str, dict[str, Any]]:
    """Figures keyed '<kind>:<metric>' (kind: concurrency or rate)."""
    figs: dict[str, dict[str, Any]] = {}
    dashes = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
    for kind in ("concurrency", "rate"):
        mine = [p for p in points if p.load_kind == kind and p.load is not None]
        if not mine:
            continue
        xlabel = (
            "Concurrent streams (closed loop)"
            if kind == "concurrency"
            else "Arrival rate (req/s, open loop)"
        )
        for metric in SWEEP_METRICS:
            fig = go.Figure()
            for pair in sorted({p.pair for p in mine}):
                settings = sorted({p.server_point for p in mine if p.pair == pair})
                for n, setting in enumerate(settings):
                    line = sorted(
                        (p for p in mine if p.pair == pair and p.server_point == setting),
                        key=lambda p: p.load or 0.0,
                    )
                    ys = [p.values.get(metric) for p in line]
                    if all(v is None for v in ys):
                        continue
                    errs = [p.intervals.get(metric) for p in line]
                    fig.add_trace(
                        go.Scatter(
                            x=[p.load for p in line],
                            y=ys,
                            mode="lines+markers",
                            name=esc(f"{pair} · {setting}"),
                            line={"color": colors[pair], "dash": dashes[n % len(dashes)]},
                            marker={
                                "size": 9,
                                "symbol": [
                                    "circle-open" if p.passed is False else "circle" for p in line
                                ],
                                "line": {"width": 2, "color": colors[pair]},
                            },
                            error_y={
                                "type": "data",
                                "array": [e if e is not None else 0 for e in errs],
                                "visible": any(e for e in errs),
                            },
                            hovertext=[_hover(p, "load", metric) for p in line],
                            hoverinfo="text",
                        )
                    )
            fig.update_layout(
                **_layout(f"{METRICS[metric].label} vs load", xlabel, axis_title(metric, currency))
            )
            fig.update_yaxes(rangemode="tozero")
            loads = sorted({p.load for p in mine if p.load is not None})
            fig.update_xaxes(tickmode="array", tickvals=loads, ticktext=[f"{v:g}" for v in loads])
            figs[f"{kind}:{metric}"] = to_json(fig)
    return figs


# ---------------------------------------------------------------------------------------------
# estimate beside measurement


ESTIMATE_METRICS = {
    "ttft": (METRICS["ttft_p50_ms"].title(), "measured_ttft_ms", "estimated_ttft_ms"),
    "tpot": (METRICS["tpot_p50_ms"].title(), "measured_tpot_ms", "estimated_tpot_ms"),
    "output_tps": (
        METRICS["output_throughput"].title(),
        "measured_output_tps",
        "estimated_output_tps",
    ),
}


def estimate_figures(
    rows: Sequence[EstimateRow], hardware: str | None, colors: dict[str, str]
) -> dict[str, dict[str, Any]]:
    figs: dict[str, dict[str, Any]] = {}
    mine = [r for r in rows if r.hardware == hardware]
    if not mine:
        return figs
    shown = mine[0].hardware_label or hardware
    loads = sorted({r.concurrency for r in mine})
    for key, (label, measured, estimated) in ESTIMATE_METRICS.items():
        fig = go.Figure()
        for pair in sorted({r.pair for r in mine}):
            color = colors.get(pair, PALETTE[0])
            for setting in sorted({r.server_point for r in mine if r.pair == pair}):
                line = sorted(
                    (r for r in mine if r.pair == pair and r.server_point == setting),
                    key=lambda r: r.concurrency,
                )
                fig.add_trace(
                    go.Scatter(
                        x=[r.concurrency for r in line],
                        y=[getattr(r, measured) for r in line],
                        mode="lines+markers",
                        name=esc(f"measured {pair} · {setting}"),
                        line={"color": color},
                        marker={"size": 9},
                    )
                )
        for variant in sorted({r.variant for r in mine}):
            first = sorted(r.pair for r in mine if r.variant == variant)[0]
            line = sorted(
                {r.concurrency: r for r in mine if r.variant == variant}.values(),
                key=lambda r: r.concurrency,
            )
            fig.add_trace(
                go.Scatter(
                    x=[r.concurrency for r in line],
                    y=[getattr(r, estimated) for r in line],
                    mode="lines+markers",
                    name=esc(f"estimate {variant} ({line[0].estimate_engine} overhead)"),
                    line={"color": colors.get(first, PALETTE[0]), "dash": "dash"},
                    marker={"size": 9, "symbol": "diamond-open"},
                )
            )
        fig.update_layout(
            **_layout(f"{label}: estimate ({shown}) vs measured", "Concurrent streams", label)
        )
        fig.update_yaxes(rangemode="tozero")
        fig.update_xaxes(tickmode="array", tickvals=loads, ticktext=[str(v) for v in loads])
        figs[key] = to_json(fig)
    return figs


# ---------------------------------------------------------------------------------------------
# a chart that has nothing to show for one workload


def placeholder(title: str, text: str) -> dict[str, Any]:
    """An empty figure that says why it is empty (a workload without such points)."""
    fig = go.Figure()
    layout = {**_layout(title, "", ""), "xaxis": {"visible": False}, "yaxis": {"visible": False}}
    fig.update_layout(
        **layout,
        annotations=[
            {"text": esc(text), "showarrow": False, "font": {"size": 14}, "x": 0.5, "y": 0.5,
             "xref": "paper", "yref": "paper"}
        ],
    )  # fmt: skip
    return to_json(fig)
