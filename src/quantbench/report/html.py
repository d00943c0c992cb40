"""index.html: one self-contained page (plotly.js, the data and the code embedded; no network).

The page is rendered by Jinja with autoescaping on, so every string from the stage outputs (model
answers, server errors and log tails, settings) is HTML-escaped. The figures travel as one JSON
document in a ``<script type="application/json">`` element, with ``<``, ``>`` and ``&`` written
as ``\\u003c``-style escapes so no text inside can close the element.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jinja2
import markupsafe
import plotly
from plotly.offline import get_plotlyjs

from quantbench.outputs import ReportInputs, clean_json
from quantbench.report import tables
from quantbench.schemas.bench import PairSummary, ServerPoint


def script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element."""
    text = json.dumps(clean_json(data), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def ticks(text: str) -> markupsafe.Markup:
    """Plain text, escaped, its `backticked` spans as <code> (the status's settings and
    commands are written for Markdown too)."""
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))


def _template_text(name: str) -> str:
    return (resources.files("quantbench.report") / "templates" / name).read_text(encoding="utf-8")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        num=tables.num,
        ms=tables.ms,
        pct=tables.pct,
        signed_pct=tables.signed_pct,
        mib=tables.mib,
        money=lambda v, currency="": tables.money(v, currency),
        figure=tables.figure_text,
        ticks=ticks,
    )
    env.globals.update(
        figure=tables.figure_text,
        load_parts=tables.load_parts,
        harness_text=tables.harness_text,
        cache_text=tables.cache_text,
        sample_text=tables.sample_text,
        any_gpu=tables.any_gpu,
        gpu_columns=tables.GPU_COLUMNS,
        gpu_note=tables.gpu_note,
        gpu_parts=tables.gpu_parts,
        gpu_sort=tables.gpu_sort,
        status_of=tables.status_of,
        why_not=tables.why_not,
        metric_label=lambda name: tables.METRICS[name].label,
    )
    return env


@dataclass
class ServerLine:
    pair: str
    engine_version: str
    point: ServerPoint


def servers(pairs: dict[str, PairSummary]) -> list[ServerLine]:
    return [
        ServerLine(name, summary.engine_version, point)
        for name, summary in sorted(pairs.items())
        for point in summary.servers
    ]


def quality_rows(inputs: ReportInputs, reference: tables.QualityReference) -> list[dict[str, Any]]:
    rows = []
    for name, q in sorted(inputs.quality.items()):
        delta = tables.QualityDelta(name, q, reference)
        rows.append(
            {
                "name": q.name,
                "format": q.format,
                "bits_per_weight": q.bits_per_weight,
                "size_bytes": q.size_bytes,
                "perplexity": q.perplexity,
                "perplexity_ratio": q.perplexity_ratio,
                "delta": delta.perplexity_delta,
                "kl_divergence": q.kl_divergence,
                "kl_high": q.kl_divergence.high,
                "top1_agreement": q.top1_agreement,
                "heldout_text": delta.heldout_text(),
                "peak_rss_bytes": q.peak_rss_bytes,
                "total_s": q.timings.total_s,
                "answers": q.heldout.answers,
            }
        )
    return rows


def variant_rows(inputs: ReportInputs) -> list[dict[str, Any]]:
    merged = inputs.merged_info.weights_sha256 if inputs.merged_info else {}
    rows = []
    for name, v in sorted(inputs.variants.items()):
        source = v.source.weights_sha256
        rows.append(
            {
                "name": name,
                "format": v.format,
                "gguf_type": v.gguf_type,
                "bits_per_weight": v.bits_per_weight,
                "size_bytes": v.size_bytes,
                "recipe_json": json.dumps(v.recipe, indent=2, sort_keys=True),
                "calibration": v.calibration.model_dump() if v.calibration else None,
                "libraries": v.libraries,
                "from_merged": (source == merged) if (source and merged) else None,
            }
        )
    return rows


def render_html(context: dict[str, Any], data: dict[str, Any]) -> str:
    env = _environment()
    template = env.from_string(_template_text("report.html.j2"))
    return template.render(
        **context,
        css=_template_text("report.css"),
        app_js=_template_text("report.js"),
        plotly_js=get_plotlyjs(),
        plotly_version=plotly.__version__,
        data_json=script_json(data),
    )
