"""summary.md: first, per workload, the recommendation with its status (decided, or provisional
and what would settle it), the chart of the ranked figure against quality (as text) and a
compact table of the pairs; then, linked from there, per workload the decision (winner with
intervals, ties, the rule that decided), the ranking across workloads, and every row that is
not ranked with its reason, for a pull request or a chat.

Text that came from a model or a server (error messages, reasons quoting them) is escaped so it
cannot break the table or inject markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from quantbench.decision.profiles import Profile
from quantbench.exchange.figures import ImportedRuns
from quantbench.report import foreign
from quantbench.report.overview import (
    VERDICTS,
    OverviewRow,
    compact_cells,
    compact_header,
    text_chart,
)
from quantbench.report.recommend import Recommendation
from quantbench.report.tables import (
    GPU_COLUMNS,
    METRICS,
    PairLine,
    RankCell,
    RankingRow,
    any_gpu,
    figure_text,
    gpu_note,
    gpu_parts,
    mib,
    sample_text,
    why_not,
)

_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|])")
TRUNCATE = 240


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


def md_ticks(text: str) -> str:
    """Like :func:`md`, its `backticked` spans kept as inline code (settings, commands)."""
    parts = " ".join(str(text).split()).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: all of it plain
        return md(text)

    def plain(p: str) -> str:  # md() trims; the spaces around a code span stay
        return (" " if p[:1] == " " else "") + md(p) + (" " if p[-1:] == " " and p.strip() else "")

    return "".join(code(p) if i % 2 else plain(p) for i, p in enumerate(parts))


def _short(text: str, limit: int = TRUNCATE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


STATUS = {
    "pass": "✅ ranked",
    "no SLO": "✅ ranked (no SLO)",
    "fail": "❌ misses SLO",
    "undecided": "❔ SLO undecided",
    "flagged": "🚩 flagged",
    "error": "💥 error",
}


def _cell_pair(line: PairLine, metric: str, gpu: bool = False) -> list[str]:
    """One pair's cells; ``gpu``: with the GPU columns after the ranked figure."""
    r = line.row
    measured = r is not None and r.measured and not line.failure
    where = f"{r.server_point} @ {r.load_point}" if r is not None and measured else "–"
    reasons = _short("; ".join(line.reasons))
    gpu_cells = [md("; ".join(c)) for c in gpu_parts(r if measured else None)] if gpu else []
    return [
        md(line.variant),
        md(line.engine),
        md(where),
        md(line.quality.short()),
        mib(line.peak_rss_bytes),
        md(line.served_check),
        md("; ".join(line.task_parts)),
        md(figure_text(r, metric)) if measured else "–",
        *gpu_cells,
        md(figure_text(r, "ttft_p90_ms")) if measured else "–",
        md(figure_text(r, "tpot_p50_ms")) if measured else "–",
        md(sample_text(r)) if measured and r is not None else "–",
        f"{STATUS[line.status]}: {md(reasons)}" if reasons else STATUS[line.status],
    ]


def table(lines: list[PairLine], metric: str) -> str:
    """Each pair at its row; the GPU columns beside the ranked figure where a row has them."""
    gpu = any_gpu(line.row for line in lines)
    header = [
        "variant", "engine", "setting @ load", "quality vs merged bf16", "peak mem",
        "served check", "fine-tune's task served", METRICS[metric].label,
        *(GPU_COLUMNS if gpu else ()), "TTFT p90", "TPOT p50", "sample", "status",
    ]  # fmt: skip
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for line in lines:
        out.append("| " + " | ".join(_cell_pair(line, metric, gpu)) + " |")
    if gpu:
        out += ["", md(gpu_note([line.row for line in lines]))]
    return "\n".join(out)


def _rank_cell(cell: RankCell | None) -> str:
    if cell is None:
        return "–"
    if cell.rank is None:
        return "not ranked"
    mark = "★ " if cell.winner else ""
    tie = " (tie)" if cell.tie else " (not yet separable)" if cell.contender else ""
    return f"{mark}{cell.rank}{tie}: {md(cell.figure())}"


def ranking_table(ranking: list[RankingRow], profiles: list[Profile]) -> str:
    header = ["pair"] + [
        f"{md(p.workload)} ({'good tok/s' if p.rank_by_goodput else 'tok/s'})" for p in profiles
    ]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in ranking:
        cells = [md(row.pair)] + [_rank_cell(row.cells.get(p.workload)) for p in profiles]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def slug(heading: str) -> str:
    """The fragment GitHub gives a heading (its text lower-cased, punctuation dropped, each
    space a hyphen), so the first screen links to the details below."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def details_heading(profile: Profile) -> tuple[str, str]:
    """(the workload's details heading as written, its fragment)."""
    slo = code(profile.slo) if profile.slo.strip() else "no constraints"
    text = f"Workload {profile.workload}: {profile.slo.strip() or 'no constraints'}"
    return f"## Workload `{md(profile.workload)}`: {slo}", slug(" ".join(text.split()))


STATUS_WORDS = {"decided": "decided", "provisional": "provisional", "none": "nothing to deploy"}


def _first_screen(
    recs: list[Recommendation],
    profiles: list[Profile],
    overview: dict[str, list[OverviewRow]],
    quality_key: str,
) -> list[str]:
    """Per workload: its status, the recommendation's first line, what decided or what would
    settle it, the chart (as text) and the compact table; the verdicts' words once below."""
    parts: list[str] = []
    used: list[str] = []
    for profile in profiles:
        rec = next(r for r in recs if r.profile is profile)
        rows = overview.get(profile.workload, [])
        status = rec.settled.status
        _, fragment = details_heading(profile)
        parts += [f"### `{md(profile.workload)}`: {STATUS_WORDS[status]}", ""]
        parts += [f"**{md(rec.headline)}**", ""]
        more = f"[figures, comparisons, reasons](#{fragment})"
        if status == "provisional":
            parts.append(f"What would settle it ({more}):")
            parts += [f"- {md_ticks(t)}" for t in rec.settled.to_settle()]
        elif rec.winner is not None:
            parts.append(f"Decided by: {md(rec.decided_by)}. {more}")
        else:
            parts.append(f"Why: {more}")
        parts.append("")
        metric = profile.ranked_by
        chart = text_chart(rows, metric, quality_key)
        if chart:
            parts += ["```text", *chart, "```", ""]
        if rows:
            header = ["", *compact_header(metric, quality_key)]
            parts.append("| " + " | ".join(header) + " |")
            parts.append("|" + "---|" * len(header))
            for row in rows:
                cells = compact_cells(row, metric, quality_key)
                name = f"**{md(cells[0])}**" if row.verdict == "winner" else md(cells[0])
                cells = [md(row.mark), name, *(md(c) for c in cells[1:])]
                parts.append("| " + " | ".join(cells) + " |")
            parts.append("")
            used += [r.verdict for r in rows if r.verdict not in used]
    if used:
        parts.append(
            "Letters: the table's rows in the chart (lower case: may not be recommended, grey "
            "on the page). Verdicts: "
            + "; ".join(f"*{w}*: {md(VERDICTS[w])}" for w in VERDICTS if w in used)
            + "."
        )
        parts.append("")
    return parts


def _decision(rec: Recommendation, parts: list[str]) -> None:
    """The winner, its figures, the rule that decided and the ties (or why there is none)."""
    parts += [f"**{md(rec.headline)}**", ""]
    if rec.winner is None:
        parts += [f"- {md(_short(miss, 400))}" for miss in rec.misses]
        parts.append("")
        return
    parts.append("; ".join(f"{md(label)} {md(value)}" for label, value in rec.figures) + ".")
    parts.append("")
    parts.append(f"Decided by: {md(rec.decided_by)}.")
    if rec.comparisons:
        parts.append("")
        parts.append("Against the leader (the interval on the ratio of the ranked figures):")
        parts += [f"- {md(line)}" for line in rec.comparisons]
    if rec.tradeoffs:
        parts.append("")
        parts += [f"Traded: {md(line)}." for line in rec.tradeoffs]
    if rec.ties:
        parts.append("")
        parts.append("Equivalent to the winner, or not yet separable from it:")
        if rec.winner_tie is not None:
            parts.append(f"- winner {md(rec.winner_tie.text())}")
        tied = {j.key for j in rec.profile.ties}
        parts += [
            f"- {'tied' if t.judged.key in tied else 'not yet separable'} {md(t.text())}"
            for t in rec.ties
        ]
    if rec.stability:
        parts.append("")
        parts.append(
            "Stability (every contender's measurements resampled, the decision taken again): "
            + "; ".join(md(line) for line in rec.stability)
            + "."
        )
    parts.append("")


def summary_markdown(
    recs: list[Recommendation],
    ranking: list[RankingRow],
    profiles: list[Profile],
    problems: list[str],
    title: str,
    traffic: dict[str, str] | None = None,
    tuning: dict[str, list[str]] | None = None,
    estimate_band: dict[str, list[str]] | None = None,
    edges: dict[str, list[str]] | None = None,
    not_served: dict[str, str] | None = None,
    imported: Sequence[ImportedRuns] = (),
    screened: dict[str, str] | None = None,
    overview: dict[str, list[OverviewRow]] | None = None,
    quality_key: str = "perplexity_ratio",
) -> str:
    parts = [f"# {md(title)}", ""]
    if not profiles:
        parts += ["No benchmark results yet: nothing to recommend.", ""]
    notes = [
        f"{len(problems)} missing or unreadable input{'s' if len(problems) != 1 else ''}"
        if problems
        else "",
        f"{len(not_served)} pair{'s' if len(not_served) != 1 else ''} not served on this machine"
        if not_served
        else "",
        f"{len(screened)} pair{'s' if len(screened) != 1 else ''} measured at their floor"
        if screened
        else "",
    ]
    if any(notes):
        parts += ["Notes at the end: " + "; ".join(n for n in notes if n) + ".", ""]
    if profiles:
        parts += _first_screen(recs, profiles, overview or {}, quality_key)
        parts += ["---", ""]
    for profile in profiles:
        rec = next(r for r in recs if r.profile is profile)
        heading, _ = details_heading(profile)
        parts += [heading, ""]
        _decision(rec, parts)
        if (traffic or {}).get(profile.workload):
            parts += [md((traffic or {})[profile.workload]), ""]
        if rec.winner is not None:
            parts.append(f"What you give up: {md(rec.given_up)}.")
            parts.append("")
            # the deployable command, not the bench's own (this clone's paths, its free port,
            # the harness's flags): best_config.json keeps both
            parts.append(
                f"Command (from the project's root; `HOST` and `PORT` yours): {code(rec.command)}"
            )
            if rec.left_out:
                parts.append("")
                parts.append(
                    "Left out of the measured command (the harness's own): "
                    + ", ".join(code(x) for x in rec.left_out)
                )
            if rec.verdicts:
                parts.append("")
                parts.append("SLO: " + "; ".join(md(v.reason) for v in rec.verdicts))
            parts.append("")
        if profile.gated:
            parts.append(
                "Not recommended for quality: "
                + "; ".join(f"{md(v)} ({md(why)})" for v, why in sorted(profile.gated.items()))
            )
            parts.append("")
        parts.append(
            f"Each pair at its best ranked point (or its nearest miss), by "
            f"{METRICS[profile.ranked_by].label.lower()}:"
        )
        parts += ["", table(rec.lines, profile.ranked_by), ""]
        gains = (tuning or {}).get(profile.workload) or []
        if gains:
            parts.append(
                "Tuned against default (each swept pair's best row over the best row at its "
                "default settings, which are the engine's own unless the line says what they "
                "hold; same SLO; 95 % interval):"
            )
            parts += ["", *(f"- {md(g)}" for g in gains), ""]
        band = (estimate_band or {}).get(profile.workload) or []
        if band:
            parts.append(f"Estimate against measurement: {md(band[0])}.")
            parts += ["", *(f"- {md(b)}" for b in band[1:]), ""] if band[1:] else [""]
        edge = (edges or {}).get(profile.workload) or []
        if edge:
            parts.append("SLO edge (most streams meeting the SLO), predicted against measured:")
            parts += ["", *(f"- {md(e)}" for e in edge), ""]
        for extra in recs:
            p = extra.profile
            if p.workload != profile.workload or p.is_default:
                continue
            parts += [f"### Profile `{md(p.name)}`: {code(p.slo)}", ""]
            _decision(extra, parts)
    if profiles:
        parts += ["## Ranking across workloads", ""]
        parts.append(
            "Each pair at its best ranked point per workload; ★ is the workload's winner, "
            "(tie) a pair shown equivalent to it within the margin (a tie-break chose), "
            "(not yet separable) one more measurement would tell apart from it."
        )
        parts += ["", ranking_table(ranking, profiles), ""]
        flagged = [(p, r) for p in profiles for r in p.rows if not r.rankable]
        parts += ["## Rows not ranked", ""]
        if not flagged:
            parts += ["Every measured row met its SLO and every check.", ""]
        for p, r in flagged:
            reasons = "; ".join(why_not(r)) or "not ranked"
            parts.append(f"- `{md(p.workload)}` · {md(r.label)}: {md(_short(reasons, 400))}")
        parts.append("")
    if not_served:
        parts += ["## Pairs not served on this machine", ""]
        parts.extend(f"- `{md(name)}`: {md(why)}" for name, why in sorted(not_served.items()))
        parts.append("")
    if screened:
        parts += ["## Pairs measured at their floor (the quality gate excludes them)", ""]
        parts += [
            "Served on one server setting, each workload's first load point at its "
            "`precision.min_requests` (`bench.quality_gated: screen`): no decision can rank them, "
            "so their figures carry wider intervals, their lower loads are not run and their "
            "servers are not asked the fine-tune's task (their variants' own answers are in "
            "their quality rows).",
            "",
        ]
        parts.extend(f"- `{md(name)}`: {md(why)}" for name, why in sorted(screened.items()))
        parts.append("")
    parts += foreign.markdown(imported, md)
    if problems:
        parts.append("## Missing or unreadable inputs")
        parts.append("")
        parts.extend(f"- {md(p)}" for p in problems)
        parts.append("")
    parts.append("Open `reports/index.html` for every row's figures, the charts and provenance.")
    return "\n".join(parts) + "\n"
