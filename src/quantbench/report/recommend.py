"""The recommendation per profile, in words: what to deploy and what it costs in quality."""

from __future__ import annotations

from dataclasses import dataclass

from quantbench.report.inputs import ReportInputs
from quantbench.report.profiles import JudgedRow, Profile, Verdict
from quantbench.report.tables import (
    PairLine,
    QualityDelta,
    QualityReference,
    command_line,
    mib,
    money,
    ms,
    num,
    pair_lines,
)


@dataclass
class Recommendation:
    profile: Profile
    winner: JudgedRow | None
    lines: list[PairLine]
    headline: str
    given_up: str
    command: str
    env: dict[str, str]
    verdicts: list[Verdict]
    misses: list[str]
    """Without a winner: per pair, why its nearest point misses."""


def _figures(j: JudgedRow, currency: str) -> str:
    r = j.row
    parts = [f"{num(r.output_throughput)} output tok/s"]
    if r.goodput is not None:
        parts.append(f"goodput {num(r.goodput)} req/s")
    parts.append(f"TTFT p50/p99 {ms(r.ttft_p50_ms)} / {ms(r.ttft_p99_ms)}")
    parts.append(f"TPOT p50/p99 {ms(r.tpot_p50_ms)} / {ms(r.tpot_p99_ms)}")
    if r.cost_per_million_tokens is not None:
        parts.append(f"{money(r.cost_per_million_tokens, currency)} per 1M output tokens")
    return ", ".join(parts)


def recommend(
    inputs: ReportInputs, profile: Profile, reference: QualityReference
) -> Recommendation:
    lines = pair_lines(inputs, profile, reference)
    best = profile.best
    if best is None:
        misses = []
        for line in lines:
            gated = profile.gated.get(line.variant)
            why = "; ".join(line.reasons) if not line.passes else "meets the SLO"
            misses.append(f"{line.pair}: {why}" + (f" (also excluded: {gated})" if gated else ""))
        if not lines:
            headline = "No benchmark results yet: nothing to recommend."
        else:
            headline = (
                f"No measured configuration meets profile {profile.name!r}"
                + (f" ({profile.slo})" if profile.slo else "")
                + "."
            )
        return Recommendation(profile, None, lines, headline, "", "", {}, [], misses)
    summary = inputs.pairs[best.pair]
    row = best.row
    server = summary.server(row.server_point)
    argv = row.command or (server.command if server else [])
    env = row.env or (server.env if server else {})
    setting = row.server_point if row.server_point != "default" else "default settings"
    rss = server.report.peak_rss_bytes if server else None
    headline = (
        f"Deploy {best.variant} on {best.engine} ({setting}; measured at load {row.load_point}): "
        f"{_figures(best, summary.currency)}"
        + (f"; peak server memory {mib(rss)}" if rss else "")
        + "."
    )
    delta = QualityDelta(best.variant, inputs.quality.get(best.variant), reference)
    given_up = delta.given_up()
    return Recommendation(
        profile, best, lines, headline, given_up, command_line(argv), env, best.verdicts, []
    )
