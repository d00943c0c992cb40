"""Build every report file from the loaded stage outputs, and write them all-or-nothing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench.report import charts
from quantbench.report.best_config import best_config
from quantbench.report.dvcfiles import metrics_json, pairs_csv, points_csv
from quantbench.report.estimates import estimate_rows, preferred_hardware
from quantbench.report.html import quality_rows, render_html, servers, variant_rows
from quantbench.report.inputs import ReportInputs
from quantbench.report.markdown import summary_markdown
from quantbench.report.profiles import judge_profiles
from quantbench.report.recommend import recommend
from quantbench.report.spec import ReportSettings
from quantbench.report.tables import METRICS, point_rows, quality_reference

TITLE = "quantbench: which deployment?"
EXPLORER_METRICS = (
    "output_throughput",
    "goodput",
    "request_throughput",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "cost_per_million_tokens",
    "error_rate",
    "load",
    "peak_rss_mib",
    "size_mib",
    "perplexity",
    "perplexity_ratio",
    "kl_mean",
    "top1_agreement",
    "heldout_accuracy",
)

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


def build_report(
    inputs: ReportInputs,
    *,
    slo: str,
    settings: ReportSettings | None = None,
    confidence: float = 0.95,
    params: dict[str, Any] | None = None,
    title: str = TITLE,
) -> ReportFiles:
    """Judge, pick, draw and lay out everything; nothing is written here."""
    settings = settings or ReportSettings()
    profiles = judge_profiles(inputs, slo, settings, confidence)
    default = profiles[0]
    reference = quality_reference(inputs)
    recs = [recommend(inputs, p, reference) for p in profiles]
    lines_by_profile = {rec.profile.name: rec.lines for rec in recs}
    points = point_rows(inputs, default)
    currency = next((s.currency for s in inputs.pairs.values()), "")
    colors = charts.colors_for(list(inputs.pairs))

    figures: dict[str, Any] = {}
    quality_key = settings.quality_axis
    if points:
        figures["pareto_latency"] = charts.points_scatter(
            points,
            settings.latency_axis,
            "output_throughput",
            colors,
            f"Throughput vs {METRICS[settings.latency_axis].label}",
            default.best,
            currency,
        )
    pair_pts = charts.pair_points(lines_by_profile[default.name], inputs)
    if any(p.values.get(quality_key) is not None for p in pair_pts):
        figures["pareto_quality"] = charts.points_scatter(
            pair_pts,
            "output_throughput",
            quality_key,
            colors,
            f"{METRICS[quality_key].label} vs throughput",
            default.best,
        )
        if any(p.values.get("peak_rss_mib") is not None for p in pair_pts):
            figures["pareto_memory"] = charts.points_scatter(
                pair_pts,
                "peak_rss_mib",
                quality_key,
                colors,
                f"Peak memory vs {METRICS[quality_key].label.lower()}",
                default.best,
            )

    groups: dict[str, dict[str, Any]] = {}
    sweep = charts.sweeps(points, colors, currency)
    if sweep:
        groups["sweep"] = sweep
    dist = charts.distributions(inputs, default, colors, settings.max_points_per_distribution)
    if any(fig["data"] for fig in dist.values()):
        groups["dist"] = {k: v for k, v in dist.items() if v["data"]}
    est_rows, est_notes = estimate_rows(inputs, default)
    hardware = (
        preferred_hardware(inputs.estimates)
        if not any(r.source == "estimate stage" for r in est_rows)
        else (est_rows[0].hardware if est_rows else None)
    )
    est_figs = charts.estimate_figures(est_rows, hardware, colors)
    if est_figs:
        groups["estimate"] = est_figs

    explorer = None
    if points:
        keys = [k for k in EXPLORER_METRICS if any(p.values.get(k) is not None for p in points)]
        explorer = {
            "x": settings.latency_axis if settings.latency_axis in keys else keys[0],
            "y": "output_throughput" if "output_throughput" in keys else keys[-1],
            "metrics": {
                k: {"label": METRICS[k].label, "unit": METRICS[k].unit, "better": METRICS[k].better}
                for k in keys
            },
            "points": [p.to_dict() for p in points],
        }

    sweep_options = [
        (key, f"{METRICS[key.split(':')[1]].label} vs {key.split(':')[0]}") for key in sweep
    ]
    base = inputs.base_info
    model_name = base.model_name if base else ""
    env = inputs.env
    hardware_text = ""
    if env is not None:
        gpus = ", ".join(g.name for g in env.gpus)
        hardware_text = gpus or f"{env.cpu.model} ({env.cpu.logical_cores} cores)"
    context = {
        "title": title,
        "model_name": model_name,
        "merged_sha": inputs.merged_info.folder_sha256 if inputs.merged_info else None,
        "hardware": hardware_text,
        "n_pairs": len(inputs.pairs),
        "n_points": len(points),
        "problems": inputs.problems,
        "recs": recs,
        "figures": figures,
        "groups": groups,
        "explorer": explorer,
        "sweep_options": sweep_options,
        "dist_options": [(k, charts.DISTRIBUTIONS[k]) for k in groups.get("dist", {})],
        "estimate_options": [(k, charts.ESTIMATE_METRICS[k][0]) for k in est_figs],
        "estimate_hardware": next(
            (r.hardware_label for r in est_rows if r.hardware == hardware), hardware
        ),
        "estimate_rows": est_rows,
        "estimate_notes": est_notes,
        "max_points": settings.max_points_per_distribution,
        "reference": reference,
        "quality_rows": quality_rows(inputs, reference),
        "all_rows": default.rows,
        "currency": currency,
        "servers": servers(inputs.pairs),
        "base": base,
        "merge": inputs.merge,
        "finetune": inputs.finetune,
        "env": env,
        "pairs": [s for _, s in sorted(inputs.pairs.items())],
        "variants": variant_rows(inputs),
        "params_json": json.dumps(params or {}, indent=2, sort_keys=True, default=str),
    }
    data = {
        "template": charts.template_json(),
        "palette": list(charts.PALETTE),
        "figures": figures,
        "groups": groups,
        "explorer": explorer,
    }
    html = render_html(context, data)
    config = best_config(inputs, profiles, reference)
    metrics = metrics_json(inputs, profiles, lines_by_profile, points)
    files = {
        INDEX_HTML: html,
        SUMMARY_MD: summary_markdown(recs, inputs.problems, title),
        BEST_CONFIG: _json_text(config),
        METRICS_JSON: _json_text(metrics),
        POINTS_CSV: points_csv(points),
        PAIRS_CSV: pairs_csv(lines_by_profile[default.name], inputs),
    }
    return ReportFiles(files=files, best_config=config, metrics=metrics)
