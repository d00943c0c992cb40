"""Build every report file from the loaded stage outputs, and write them all-or-nothing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantbench.decision.profiles import JudgedRow, Profile, judge_profiles, stale_slos
from quantbench.decision.tuning import tuning_gains
from quantbench.outputs import ReportInputs, exposed_servers
from quantbench.report import charts, foreign
from quantbench.report.best_config import best_config
from quantbench.report.dvcfiles import metrics_json, pairs_csv, points_csv
from quantbench.report.estimates import (
    EstimateRow,
    band_summary,
    edge_rows,
    estimate_rows,
    preferred_hardware,
)
from quantbench.report.html import quality_rows, render_html, servers, variant_rows
from quantbench.report.markdown import summary_markdown
from quantbench.report.overview import (
    VERDICTS,
    OverviewRow,
    anchor,
    compact_cells,
    compact_header,
    overview_rows,
)
from quantbench.report.recommend import Recommendation, recommend
from quantbench.report.spec import ReportSettings
from quantbench.report.tables import METRICS, PointRow, point_rows, quality_reference, ranking
from quantbench.schemas import metrics as registry

TITLE = "quantbench: which deployment?"
EXPLORER_METRICS = registry.EXPLORER
FIGURE_TITLES = {
    "pareto_latency": "Throughput vs latency",
    "pareto_quality": "Quality vs throughput",
    "pareto_memory": "Peak memory vs quality",
}

# Output files, relative to the output folder (reports/).
INDEX_HTML = Path("index.html")
SUMMARY_MD = Path("summary.md")
BEST_CONFIG = Path("best_config.json")
METRICS_JSON = Path("report_metrics.json")
POINTS_CSV = Path("plots/points.csv")
PAIRS_CSV = Path("plots/pairs.csv")


@dataclass
class ReportFiles:
    """Every output as text, keyed by its path relative to the output folder."""

    files: dict[Path, str]
    best_config: dict[str, Any]
    metrics: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    """What was missing, unreadable or stale (also at the top of the page and in summary.md)."""

    def write(self, out_dir: Path) -> list[Path]:
        """Write every file (temp file + rename each); returns the paths written."""
        written = []
        for rel, text in self.files.items():
            path = out_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            tmp.write_text(text, encoding="utf-8")
            written.append((tmp, path))
        for tmp, path in written:  # all rendered and on disk before any replaces the old one
            tmp.replace(path)
        return [path for _, path in written]


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


def traffic_text(inputs: ReportInputs, workload: str) -> str:
    """The workload's traffic as the bench stages sent it (the workloads stage's summary, kept in
    each run's summary.json): size, mean lengths, the prompt share a prefix cache could serve,
    and the turns dropped because they would not fit the engines' context ('' if unknown)."""
    for key in sorted(inputs.records, key=lambda k: (k.pair, k.server_point, k.load_point)):
        if key.workload != workload:
            continue
        for rep in inputs.records[key]:
            s = rep.session.workload_summary if rep.session is not None else None
            if s is None:
                continue
            parts = [f"{s.conversations} conversations, {s.requests} requests"]
            ins, outs = s.input_tokens, s.output_tokens
            if ins is not None and outs is not None:
                unit = "tokens" if s.counted_with == "tokenizer" else "words"
                parts.append(
                    f"prompts {ins.mean:.0f} {unit} on average (p90 {ins.p90:.0f}), "
                    f"answers {outs.mean:.0f} (p90 {outs.p90:.0f})"
                )
            parts.append(f"a prefix cache could serve {s.prefix_reuse_share:.0%} of prompts")
            dropped, context = s.turns_dropped_to_fit, s.context
            parts.append(
                f"{dropped} turns dropped to fit the {context}-token context"
                if dropped
                else f"every turn fits the {context}-token context"
                if context
                else "no context limit checked"
            )
            return "Traffic: " + "; ".join(parts) + "."
    return ""


@dataclass
class WorkloadSection:
    """What the page shows of one workload: its own profile, the extra ones, every row."""

    profile: Profile
    rec: Recommendation
    extra: list[Recommendation] = field(default_factory=list)
    estimate_rows: list[EstimateRow] = field(default_factory=list)
    traffic: str = ""
    """What the workload's requests were made of (traffic_text)."""
    tuning: list[str] = field(default_factory=list)
    """Per pair that swept its settings: its best against its defaults (decision.tuning)."""
    estimate_band: list[str] = field(default_factory=list)
    """How many planning figures the estimate got within ±25 %, and what missed (band_summary)."""
    edges: list[str] = field(default_factory=list)
    """The SLO edge predicted against measured, per pair and setting (edge_rows)."""
    overview: list[OverviewRow] = field(default_factory=list)
    """The first screen's rows: each pair, then every row the decision names (overview)."""

    @property
    def anchor(self) -> str:
        """The fragment of the workload's details below the first screen."""
        return anchor(self.name)

    @property
    def name(self) -> str:
        return self.profile.workload

    @property
    def rows(self) -> list[JudgedRow]:
        return self.profile.rows

    @property
    def flagged(self) -> list[JudgedRow]:
        return [r for r in self.profile.rows if not r.rankable]


def _view(
    inputs: ReportInputs,
    rec: Recommendation,
    points: list[PointRow],
    settings: ReportSettings,
    colors: dict[str, str],
    currency: str,
    est: list[EstimateRow],
    hardware: str | None,
) -> dict[str, Any]:
    """One workload's figures (the page swaps them with its workload select)."""
    profile = rec.profile
    figures: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    quality_key = settings.quality_axis
    rank = profile.ranked_by  # what the winner is chosen by
    if points:
        figures["pareto_latency"] = charts.points_scatter(
            points,
            settings.latency_axis,
            rank,
            colors,
            f"{profile.workload}: {METRICS[rank].label.lower()} vs "
            f"{METRICS[settings.latency_axis].label}",
            profile.best,
            currency,
        )
    pair_pts = charts.pair_points(rec.lines, inputs, profile.workload)
    if any(p.values.get(quality_key) is not None for p in pair_pts):
        figures["pareto_quality"] = charts.points_scatter(
            pair_pts,
            rank,
            quality_key,
            colors,
            f"{profile.workload}: {METRICS[quality_key].label.lower()} vs "
            f"{METRICS[rank].label.lower()}",
            profile.best,
        )
        if any(p.values.get("peak_rss_mib") is not None for p in pair_pts):
            figures["pareto_memory"] = charts.points_scatter(
                pair_pts,
                "peak_rss_mib",
                quality_key,
                colors,
                f"{profile.workload}: peak memory vs {METRICS[quality_key].label.lower()}",
                profile.best,
            )
    sweep = charts.sweeps(points, colors, currency)
    if sweep:
        groups["sweep"] = sweep
    dist = charts.distributions(inputs, profile, colors, settings.max_points_per_distribution)
    if any(fig["data"] for fig in dist.values()):
        groups["dist"] = {k: v for k, v in dist.items() if v["data"]}
    est_figs = charts.estimate_figures(est, hardware, colors)
    if est_figs:
        groups["estimate"] = est_figs
    explorer = None
    if points:
        keys = [k for k in EXPLORER_METRICS if any(p.values.get(k) is not None for p in points)]
        explorer = {"points": [p.to_dict() for p in points], "keys": keys}
    return {"figures": figures, "groups": groups, "explorer": explorer}


def _fill(views: dict[str, dict[str, Any]]) -> None:
    """Every workload's view gets every figure some workload has (a placeholder saying why
    where it has none), so switching the workload redraws every chart."""
    names = {n for v in views.values() for n in v["figures"]}
    for w, view in views.items():
        for name in names - set(view["figures"]):
            view["figures"][name] = charts.placeholder(
                FIGURE_TITLES.get(name, name), f"nothing to show for workload {w}"
            )
    groups = {g for v in views.values() for g in v["groups"]}
    for g in groups:
        keys = list(dict.fromkeys(k for v in views.values() for k in v["groups"].get(g, {})))
        for w, view in views.items():
            mine = view["groups"].setdefault(g, {})
            for key in keys:
                if key not in mine:
                    mine[key] = charts.placeholder(key, f"no such points in workload {w}")


@dataclass
class _Estimates:
    """The roofline rows each workload's section shows, and the hardware its chart is drawn for."""

    by_workload: dict[str, tuple[list[Any], list[str]]]
    rows: list[Any]
    hardware: str | None

    @classmethod
    def of(cls, inputs: ReportInputs, defaults: list[Any]) -> _Estimates:
        by_workload = {p.workload: estimate_rows(inputs, p) for p in defaults}
        for w in list(by_workload)[1:]:  # the estimate stage's own comparison names no workload
            rows, notes = by_workload[w]
            by_workload[w] = ([r for r in rows if r.source != "estimate stage"], notes)
        every = [r for rows, _ in by_workload.values() for r in rows]
        hardware = (
            preferred_hardware(inputs.estimates)
            if not any(r.source == "estimate stage" for r in every)
            else (every[0].hardware if every else None)
        )
        return cls(by_workload, every, hardware)

    def notes(self) -> list[str]:
        return sorted({n for _, notes in self.by_workload.values() for n in notes})

    def hardware_label(self) -> str | None:
        return next((r.hardware_label for r in self.rows if r.hardware == self.hardware),
                    self.hardware)  # fmt: skip


def _sections(
    inputs: ReportInputs,
    profiles: list[Any],
    by_key: dict[str, Any],
    points: list[Any],
    estimates: _Estimates,
    settings: ReportSettings,
    currency: str,
) -> tuple[list[WorkloadSection], dict[str, dict[str, Any]]]:
    """Each default profile's workload section, and its charts' data (one view per workload)."""
    colors = charts.colors_for(list(inputs.pairs))
    sections: list[WorkloadSection] = []
    views: dict[str, dict[str, Any]] = {}
    for profile in (p for p in profiles if p.is_default):
        w = profile.workload
        est_rows, _ = estimates.by_workload[w]
        mine = [p for p in points if p.workload == w]
        views[w] = _view(
            inputs, by_key[profile.key], mine, settings, colors, currency, est_rows,
            estimates.hardware,
        )  # fmt: skip
        extra = [by_key[p.key] for p in profiles if p.workload == w and not p.is_default]
        gains = [g.text() for g in tuning_gains(inputs, profile)]
        rows = overview_rows(inputs, profile, by_key[profile.key].lines, settings.quality_axis)
        views[w]["overview"] = charts.overview_scatter(
            rows, profile.ranked_by, settings.quality_axis, colors,
            f"{w}: {METRICS[profile.ranked_by].label.lower()} against quality", height=230,
        )  # fmt: skip
        sections.append(
            WorkloadSection(
                profile,
                by_key[profile.key],
                extra,
                est_rows,
                traffic_text(inputs, w),
                gains,
                band_summary(est_rows),
                [e.text for e in edge_rows(inputs, profile)],
                rows,
            )
        )
    _fill(views)
    return sections, views


def _explorer(points: list[Any], settings: ReportSettings) -> dict[str, Any] | None:
    """The free-axes chart's metrics (those some point has), and its axes at first."""
    keys = [k for k in EXPLORER_METRICS if any(p.values.get(k) is not None for p in points)]
    if not keys:
        return None
    return {
        "x": settings.latency_axis if settings.latency_axis in keys else keys[0],
        "y": "output_throughput" if "output_throughput" in keys else keys[-1],
        "metrics": {
            k: {"label": METRICS[k].label, "unit": METRICS[k].unit, "better": METRICS[k].better}
            for k in keys
        },
    }


def _chart_options(views: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The page's chart menus, from the views' keys (every view has every key: _fill)."""
    first = next(iter(views.values()), {"figures": {}, "groups": {}})
    groups = first["groups"]
    return {
        "figures": sorted(first["figures"]),
        "groups": {g: list(v) for g, v in groups.items()},
        "sweep_options": [
            (key, f"{METRICS[key.split(':')[1]].label} vs {key.split(':')[0]}")
            for key in groups.get("sweep", {})
        ],
        "dist_options": [(k, charts.DISTRIBUTIONS[k]) for k in groups.get("dist", {})],
        "estimate_options": [
            (k, charts.ESTIMATE_METRICS[k][0]) for k in groups.get("estimate", {})
        ],
    }


def _hardware_text(inputs: ReportInputs) -> str:
    env = inputs.env
    if env is None:
        return ""
    gpus = ", ".join(g.name for g in env.gpus)
    return gpus or f"{env.cpu.model} ({env.cpu.logical_cores} cores)"


def build_report(
    inputs: ReportInputs,
    *,
    slo: str,
    settings: ReportSettings | None = None,
    confidence: float = 0.95,
    params: dict[str, Any] | None = None,
    title: str = TITLE,
    workloads: dict[str, str] | None = None,
) -> ReportFiles:
    """Judge, pick, draw and lay out everything; nothing is written here.

    ``workloads``: the configured workloads and their SLO texts (params.yaml); ``slo`` is the SLO
    of a workload nothing else names one for."""
    settings = settings or ReportSettings()
    profiles = judge_profiles(inputs, slo, settings, confidence, workloads)
    defaults = [p for p in profiles if p.is_default]
    problems = [*inputs.problems, *stale_slos(inputs, workloads), *exposed_servers(inputs)]
    reference = quality_reference(inputs)
    recs = [recommend(inputs, p, reference) for p in profiles]
    by_key = {rec.profile.key: rec for rec in recs}
    lines_by_profile = {rec.profile.key: rec.lines for rec in recs}
    points = point_rows(inputs, defaults)
    ranks = ranking(inputs, defaults)
    estimates = _Estimates.of(inputs, defaults)
    currency = next((s.currency for s in inputs.pairs.values()), "")
    sections, views = _sections(inputs, profiles, by_key, points, estimates, settings, currency)
    explorer = _explorer(points, settings)
    base = inputs.base_info
    context = {
        "title": title,
        "model_name": base.model_name if base else "",
        "merged_sha": inputs.merged_info.folder_sha256 if inputs.merged_info else None,
        "hardware": _hardware_text(inputs),
        "n_pairs": len(inputs.pairs),
        "n_points": len(points),
        "problems": problems,
        "not_served": sorted(inputs.not_served.items()),
        "screened": sorted(inputs.screened.items()),
        "foreign_columns": foreign.COLUMNS,
        "foreign_rows": foreign.rows(inputs.imported),
        "foreign_note": foreign.NOTE,
        "sections": sections,
        "ranking": ranks,
        "ranking_profiles": defaults,
        "explorer": explorer,
        **_chart_options(views),
        "estimate_hardware": estimates.hardware_label(),
        "estimate_notes": estimates.notes(),
        "max_points": settings.max_points_per_distribution,
        "reference": reference,
        "quality_rows": quality_rows(inputs, reference),
        "currency": currency,
        "servers": servers(inputs.pairs),
        "base": base,
        "merge": inputs.merge,
        "finetune": inputs.finetune,
        "env": inputs.env,
        "pairs": [s for _, s in sorted(inputs.pairs.items())],
        "variants": variant_rows(inputs),
        "params_json": json.dumps(params or {}, indent=2, sort_keys=True, default=str),
        "quality_axis": settings.quality_axis,
        "compact_cells": compact_cells,
        "compact_header": compact_header,
        "verdict_words": VERDICTS,
    }
    data = {
        "template": charts.template_json(),
        "palette": list(charts.PALETTE),
        "workloads": list(views),
        "views": views,
        "explorer": explorer,
    }
    config = best_config(inputs, profiles, reference)
    metrics = metrics_json(inputs, profiles, lines_by_profile, points, ranks)
    files = {
        INDEX_HTML: render_html(context, data),
        SUMMARY_MD: summary_markdown(
            recs,
            ranks,
            defaults,
            problems,
            title,
            {x.name: x.traffic for x in sections},
            {x.name: x.tuning for x in sections},
            {x.name: x.estimate_band for x in sections},
            {x.name: x.edges for x in sections},
            inputs.not_served,
            inputs.imported,
            inputs.screened,
            {x.name: x.overview for x in sections},
            settings.quality_axis,
        ),
        BEST_CONFIG: _json_text(config),
        METRICS_JSON: _json_text(metrics),
        POINTS_CSV: points_csv(points),
        PAIRS_CSV: pairs_csv(profiles, lines_by_profile, inputs, ranks),
    }
    return ReportFiles(files=files, best_config=config, metrics=metrics, problems=problems)
