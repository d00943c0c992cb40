"""The gathered report: ``summary.md`` and an offline ``index.html`` from the same tables.

Each table is built once (headers and cells as text) and written twice, so the two never say
different things; the page has no script and no link outside itself.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from quantbench.gather.gathered import Gathered
from quantbench.gather.machines import Interval

METRIC_NAMES = {
    "good_output_throughput": "good output tokens/s (answers within the SLOs)",
    "output_throughput": "output tokens/s (the profile sets no latency limit)",
}


@dataclass
class Table:
    title: str
    note: str
    headers: list[str]
    rows: list[list[str]]


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"


def _interval(figure: Interval | None) -> str:
    if figure is None:
        return "-"
    if figure.low is None or figure.high is None:
        return f"{_num(figure.value)} (no interval)"
    return f"{_num(figure.value)} [{_num(figure.low)}, {_num(figure.high)}]"


def _settings(settings: dict[str, object]) -> str:
    shown = {k: v for k, v in settings.items() if k != "sweep"}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "defaults"


def tables(g: Gathered) -> list[Table]:
    out = [Table(
        "Machines",
        "Each machine as its fingerprint stage recorded it (reports/env.json); experiments from "
        "one machine kind share a fingerprint.",
        ["Machine", "Fingerprint", "CPU", "Cores", "ISA", "GPUs", "Memory (GiB)",
         f"Price/hour ({g.currency})", "Experiments"],
        [[m.fingerprint.label, m.fingerprint.id, m.fingerprint.cpu_model,
          str(m.fingerprint.logical_cores or "?"), " ".join(m.fingerprint.isa) or "-",
          ", ".join(m.fingerprint.gpus) or "-", f"{m.fingerprint.memory_gib:.1f}",
          _num(m.price_per_hour) if m.price_per_hour is not None else "per experiment",
          ", ".join(m.experiments)] for m in g.machines],
    )]  # fmt: skip
    for w in g.workloads:
        out.append(Table(
            f"Workload {w.workload}",
            f"{w.verdict}. Ranked by {METRIC_NAMES.get(w.ranked_by, w.ranked_by)}; priced per "
            "million of those tokens at each experiment's bench.price_per_hour.",
            ["Machine", "Deploy", "Settings", "Tok/s [95 % CI]",
             f"Cost per 1M tokens ({g.currency}) [95 % CI]", "SLO", "Experiment"],
            [[r.label, r.best.pair or f"nothing ranked: {r.best.reason or '?'}",
              _settings(r.best.settings), _interval(r.best.tps),
              _interval(r.best.cost_per_million), r.best.slo_verdict or "-",
              r.best.experiment] for r in w.rows],
        ))  # fmt: skip
    if g.estimated:
        out.append(Table(
            "Hardware no machine here measured: the roofline's estimate",
            "An estimate from first principles (docs/ESTIMATE.md), not a measurement: the "
            "best output tokens/s the roofline expects, SLOs aside; priced where `--price` "
            "gave the hardware a price.",
            ["Hardware", "Pair", "Output tok/s (roofline)", "At concurrency",
             f"Price/hour ({g.currency})", "Cost per 1M output tokens", "From experiment"],
            [[e.hardware, e.pair, _num(e.best_output_tps), str(e.best_concurrency or "-"),
              _num(e.price_per_hour), _num(e.cost_per_million), e.experiment]
             for e in g.estimated],
        ))  # fmt: skip
    problems = [[r.experiment, p] for r in g.runs for p in r.problems]
    if problems:
        out.append(Table("Problems", "What an experiment lacked; the rest is shown.",
                         ["Experiment", "Problem"], problems))  # fmt: skip
    return out


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(g: Gathered) -> str:
    lines = [f"# quantbench: {len(g.machines)} machine(s), {len(g.runs)} experiment(s) gathered",
             "", "Written by `quantbench gather`; each experiment read at its own commit.", ""]  # fmt: skip
    for t in tables(g):
        lines += [f"## {t.title}", "", t.note, ""]
        lines.append("| " + " | ".join(map(_md_cell, t.headers)) + " |")
        lines.append("|" + "---|" * len(t.headers))
        lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in t.rows]
        lines.append("")
    return "\n".join(lines)


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:80em}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.3em .6em;
text-align:left;vertical-align:top}th{background:#f3f3f3}p.note{color:#444}"""


def page(g: Gathered) -> str:
    e = html.escape
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             f"<title>quantbench: {len(g.machines)} machines gathered</title>",
             f"<style>{STYLE}</style></head><body>",
             f"<h1>quantbench: {len(g.machines)} machine(s), {len(g.runs)} experiment(s)</h1>"]  # fmt: skip
    for t in tables(g):
        parts.append(f"<h2>{e(t.title)}</h2><p class='note'>{e(t.note)}</p><table><tr>")
        parts += [f"<th>{e(h)}</th>" for h in t.headers]
        parts.append("</tr>")
        for row in t.rows:
            parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)
