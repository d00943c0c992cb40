"""summary.md: the headline table and the recommendation, for a pull request or a chat.

Text that came from a model or a server (error messages, reasons quoting them) is escaped so it
cannot break the table or inject markup.
"""

from __future__ import annotations

import re

from quantbench.report.recommend import Recommendation
from quantbench.report.tables import PairLine, mib, money, ms, num

_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|])")


def md(text: object) -> str:
    """Plain text safe inside a Markdown table cell or paragraph."""
    flat = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", flat)


def code(text: str) -> str:
    """Inline code that survives any backticks in the text."""
    flat = " ".join(text.split())
    fence = "`" * (max((len(m) for m in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


STATUS = {"pass": "✅ pass", "fail": "❌ fail", "error": "💥 error", "no SLO": "– no SLO"}


def _cell_pair(line: PairLine) -> list[str]:
    r = line.row
    measured = r is not None and r.measured
    where = f"{r.server_point} @ {r.load_point}" if r is not None and measured else "–"
    reasons = "; ".join(line.reasons)
    if len(reasons) > 240:
        reasons = reasons[:237] + "..."
    return [
        md(line.variant),
        md(line.engine),
        md(where),
        md(line.quality.short()),
        mib(line.size_bytes),
        mib(line.peak_rss_bytes),
        f"{ms(r.ttft_p50_ms)} / {ms(r.ttft_p99_ms)}" if measured and r else "–",
        f"{ms(r.tpot_p50_ms)} / {ms(r.tpot_p99_ms)}" if measured and r else "–",
        num(r.output_throughput) if measured and r else "–",
        num(r.goodput) if measured and r else "–",
        money(r.cost_per_million_tokens, line.currency) if measured and r else "–",
        f"{STATUS[line.status]}: {md(reasons)}" if reasons else STATUS[line.status],
    ]


HEADER = [
    "variant",
    "engine",
    "setting @ load",
    "quality vs merged bf16",
    "size",
    "peak mem",
    "TTFT p50 / p99",
    "TPOT p50 / p99",
    "out tok/s",
    "goodput req/s",
    "cost / 1M tok",
    "SLO",
]


def table(lines: list[PairLine]) -> str:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for line in lines:
        out.append("| " + " | ".join(_cell_pair(line)) + " |")
    return "\n".join(out)


def summary_markdown(recs: list[Recommendation], problems: list[str], title: str) -> str:
    parts = [f"# {md(title)}", ""]
    for i, rec in enumerate(recs):
        p = rec.profile
        slo = code(p.slo) if p.slo.strip() else "no constraints"
        parts.append(f"## {'Recommendation' if i == 0 else 'Profile'} `{md(p.name)}`: {slo}")
        parts.append("")
        parts.append(f"**{md(rec.headline)}**")
        parts.append("")
        if rec.winner is not None:
            parts.append(f"What you give up: {md(rec.given_up)}.")
            parts.append("")
            parts.append(f"Command: {code(rec.command)}")
            if rec.env:
                env = " ".join(f"{k}={v}" for k, v in sorted(rec.env.items()))
                parts.append(f"Environment: {code(env)}")
            if rec.verdicts:
                parts.append("")
                parts.append("SLO: " + "; ".join(md(v.reason) for v in rec.verdicts))
        else:
            for miss in rec.misses:
                parts.append(f"- {md(miss)}")
        if p.gated:
            parts.append("")
            parts.append(
                "Not recommended for quality: "
                + "; ".join(f"{md(v)} ({md(why)})" for v, why in sorted(p.gated.items()))
            )
        parts.append("")
        if i == 0:
            parts.append(
                "Each pair at its best point under this profile (or its nearest miss). "
                f"Ranked by {p.ranked_by}."
            )
            parts.append("")
            parts.append(table(rec.lines))
            parts.append("")
    if problems:
        parts.append("## Missing or unreadable inputs")
        parts.append("")
        parts.extend(f"- {md(p)}" for p in problems)
        parts.append("")
    parts.append("Open `reports/index.html` for the charts, distributions and provenance.")
    return "\n".join(parts) + "\n"
