"""The recommendation per workload and profile, in words: what to deploy, how sure that is (the
figures' intervals, the configurations it could not be told apart from, the rule that decided),
and what it costs in quality."""

from __future__ import annotations

from dataclasses import dataclass, field

from quantbench.decision.profiles import JudgedRow, Profile
from quantbench.decision.rejudge import Verdict
from quantbench.decision.settlement import Settlement, settlement
from quantbench.outputs import ReportInputs
from quantbench.precision import Figure
from quantbench.report.deploy import deploy_entry
from quantbench.report.tables import (
    METRICS,
    PairLine,
    QualityDelta,
    QualityReference,
    figure_text,
    mib,
    money,
    num,
    pair_lines,
)
from quantbench.schemas import metrics as registry

# What a recommendation shows of its row, in order (the rank metric comes first).
SHOWN = registry.SHOWN


@dataclass
class TieLine:
    """A configuration the winner could not be told apart from, with what the rules compared."""

    judged: JudgedRow
    figure: str
    perplexity_ratio: float | None
    peak_rss_bytes: int | None
    e2e_p99: str

    def text(self) -> str:
        ratio = num(self.perplexity_ratio, 4) if self.perplexity_ratio is not None else "–"
        return (
            f"{self.judged.label}: {self.figure}; perplexity ratio {ratio}; peak memory "
            f"{mib(self.peak_rss_bytes)}; E2E p99 {self.e2e_p99}"
        )


def tie_line(judged: JudgedRow, metric: str) -> TieLine:
    return TieLine(
        judged,
        figure_text(judged.row, metric),
        judged.perplexity_ratio,
        judged.peak_rss_bytes,
        figure_text(judged.row, "e2e_p99_ms"),
    )


@dataclass
class Recommendation:
    profile: Profile
    winner: JudgedRow | None
    lines: list[PairLine]
    headline: str
    figures: list[tuple[str, str]]
    """(label, value with its interval or 'too few requests for pNN') of the winner."""
    given_up: str
    command: str
    """The deployable command line (best_config.json's ``deploy.command_line``): run from the
    project's root, the host and port the user's, the harness's own flags left out."""
    left_out: list[str]
    """What of the measured command the deployable one leaves out (the harness's flags)."""
    verdicts: list[Verdict]
    ties: list[TieLine]
    winner_tie: TieLine | None
    """The winner's own values of what the tie rules compare."""
    decided_by: str
    misses: list[str]
    """Without a winner: per pair, why its nearest point is not ranked."""
    comparisons: list[str] = field(default_factory=list)
    """Each rankable row against the leader: verdict, ratio [interval], where it comes from."""
    tradeoffs: list[str] = field(default_factory=list)
    """What a tie-break gave up of a faster row, in words."""
    stability: list[str] = field(default_factory=list)
    """How often each configuration wins the resampled decision ('x wins 94 %')."""
    status: str = ""
    settled: Settlement = field(default_factory=lambda: Settlement("none"))
    """decided, provisional (with each row still open and what would settle it), or none."""

    @property
    def title(self) -> str:
        p = self.profile
        return f"workload {p.workload}" + ("" if p.is_default else f", profile {p.name}")


def winner_headline(best: JudgedRow, metric: str, settled: Settlement) -> str:
    """The recommendation's first line: what to deploy and its figure; a provisional one says
    so first and names what is unsettled in the same line (summary.md's bold line,
    best_config.json's ``headline``)."""
    row = best.row
    setting = row.server_point if row.server_point != "default" else "default settings"
    text = (
        f"Deploy {best.variant} on {best.engine} ({setting}; measured at load {row.load_point}): "
        f"{figure_text(row, metric)} {METRICS[metric].label.lower()}"
        + (f"; peak server memory {mib(best.peak_rss_bytes)}" if best.peak_rss_bytes else "")
        + "."
    )
    if settled.status != "provisional":
        return text
    open_ = settled.unsettled()
    return f"Provisional: d{text[1:]} {open_[:1].upper()}{open_[1:]}."


def rerun_text(rerun: Figure) -> str:
    """'84.1 [70.3, 100.6] (a rerun's figure: ...)'."""
    return f"{rerun.value:.1f} [{rerun.low:.1f}, {rerun.high:.1f}] ({rerun.method})"


def figures(
    j: JudgedRow, rank_metric: str, currency: str, rerun: Figure | None = None
) -> list[tuple[str, str]]:
    """The winner's figures; ``rerun``: its ranked figure as a rerun will measure it (the drift
    and the selection included), shown after the measured one."""
    r = j.row
    names = [rank_metric, *(m for m in SHOWN if m != rank_metric)]
    out = [
        (METRICS[m].label, figure_text(r, m))
        for m in names
        if r.metric(m) is not None or m in r.too_few
    ]
    if rerun is not None and out:
        out.insert(1, (f"{METRICS[rank_metric].label}, a rerun", rerun_text(rerun)))
    if r.cost_per_million_tokens is not None:
        out.append(("Cost per 1M output tokens", money(r.cost_per_million_tokens, currency)))
    return out


def decision_lines(profile: Profile) -> tuple[list[str], list[str], list[str]]:
    """(each row against the leader, the trade-offs, the stability), in words."""
    decision = profile.decision
    if decision is None or decision.leader is None:
        return [], [], []
    confidence = profile.how.settings.confidence if profile.how else 0.95
    labels = {r.key: r.label for r in profile.rows}
    leader = labels.get(decision.leader.key, decision.leader.key)
    order = {"equivalent": 0, "not yet separable": 1, "faster": 2, "slower": 3}
    comparisons = [
        f"{labels.get(key, key)} against the leader {leader}: {c.text(confidence)}"
        for key, c in sorted(
            decision.comparisons.items(), key=lambda kv: (order.get(kv[1].verdict, 9), kv[0])
        )
    ]
    n = profile.how.resamples if profile.how else 0
    stable = [
        f"{labels.get(key, key)} wins {share:.0%} of {n} resamples, each a predicted second run"
        for key, share in sorted(profile.stability.items(), key=lambda kv: -kv[1])
    ]
    if profile.agreement is not None and decision.winner is not None:
        winner = labels.get(decision.winner.key, decision.winner.key)
        stable.append(
            f"a second run picks {winner} again with a probability of at least "
            f"{profile.agreement:.0%} ({confidence:.0%} confidence)"
        )
    return comparisons, list(decision.tradeoffs), stable


def raced_lines(inputs: ReportInputs, profile: Profile) -> list[str]:
    """The rows the race stopped part-way, each against what it raced (its pair's best row so
    far, less the decision's margins): the decision never compares them, since the race showed
    they could not rank first, and the list against the leader says so rather than leave them
    out. The default profile only: the race ranked by its SLO."""
    if not profile.is_default:
        return []
    out = []
    for pair, summary in sorted(inputs.pairs.items()):
        for server in summary.servers:
            drop = server.raced.get(profile.workload)
            if drop is None:
                continue
            for point in drop.stopped:
                out.append(
                    f"{pair} · {server.server_point} · {point}: stopped by the race, at most "
                    f"{drop.bound:.1f} against {pair} · {drop.leader}'s {drop.floor:.1f} (its "
                    "interval's low end less the decision's margins): it could not rank first"
                )
    return out


def recommend(
    inputs: ReportInputs, profile: Profile, reference: QualityReference
) -> Recommendation:
    lines = pair_lines(inputs, profile, reference)
    best = profile.best
    metric = profile.ranked_by
    if best is None:
        misses = []
        for line in lines:
            gated = profile.gated.get(line.variant)
            why = "; ".join(line.reasons) if not line.passes else "ranked"
            misses.append(f"{line.pair}: {why}" + (f" (also excluded: {gated})" if gated else ""))
        if not lines:
            headline = "No benchmark results yet: nothing to recommend."
        else:
            headline = (
                f"No measured configuration of workload {profile.workload!r} meets "
                + (f"profile {profile.name!r}" if not profile.is_default else "its SLO")
                + (f" ({profile.slo})" if profile.slo else "")
                + " and every check."
            )
        return Recommendation(
            profile, None, lines, headline, [], "", "", [], [], [], None, profile.decided_by,
            misses,
        )  # fmt: skip
    summary = inputs.pairs[best.pair]
    row = best.row
    server = summary.server(row.server_point)
    argv = row.command or (server.command if server else [])
    env = row.env or (server.env if server else {})
    deploy = deploy_entry(argv, env, best.engine, inputs.root, row.settings)
    settled = settlement(inputs, profile)
    headline = winner_headline(best, metric, settled)
    delta = QualityDelta(best.variant, inputs.quality.get(best.variant), reference)
    comparisons, tradeoffs, stable = decision_lines(profile)
    comparisons += raced_lines(inputs, profile)
    return Recommendation(
        comparisons=comparisons,
        tradeoffs=tradeoffs,
        stability=stable,
        status=profile.decision.status if profile.decision else "",
        settled=settled,
        profile=profile,
        winner=best,
        lines=lines,
        headline=headline,
        figures=figures(best, metric, summary.currency, profile.rerun),
        given_up=delta.given_up(),
        command=deploy["command_line"],
        left_out=deploy["left_out"],
        verdicts=best.verdicts,
        ties=[tie_line(t, metric) for t in [*profile.ties, *profile.unresolved]],
        winner_tie=tie_line(best, metric),
        decided_by=profile.decided_by,
        misses=[],
    )
